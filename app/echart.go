package app

import "encoding/json"

// This file is the small part of ECharts' option schema the app's line
// charts use, written as plain structs: the option JSON ECharts'
// setOption takes (echarts.apache.org/en/option.html), without a chart
// library's reflection and templates in app.wasm.

// echartOption is one chart's option.
type echartOption struct {
	Animation *bool          `json:"animation,omitempty"`
	Title     echartTitle    `json:"title"`
	Tooltip   echartTooltip  `json:"tooltip"`
	Legend    echartLegend   `json:"legend"`
	Grid      []echartGrid   `json:"grid,omitempty"`
	XAxis     []echartAxis   `json:"xAxis"`
	YAxis     []echartAxis   `json:"yAxis"`
	Series    []echartSeries `json:"series"`
}

type echartTitle struct {
	Text    string `json:"text"`
	Subtext string `json:"subtext,omitempty"`
}

type echartTooltip struct {
	Show    bool   `json:"show"`
	Trigger string `json:"trigger"`
}

type echartLegend struct {
	Show bool   `json:"show"`
	Top  string `json:"top,omitempty"`
}

type echartGrid struct {
	Top    string `json:"top,omitempty"`
	Bottom string `json:"bottom,omitempty"`
	Left   string `json:"left,omitempty"`
	Right  string `json:"right,omitempty"`
	Height string `json:"height,omitempty"`
}

// echartAxis is an axis: "value", "log" (LogBase), "time" or "category".
type echartAxis struct {
	Name         string   `json:"name,omitempty"`
	NameLocation string   `json:"nameLocation,omitempty"`
	NameGap      int      `json:"nameGap,omitempty"`
	Type         string   `json:"type"`
	LogBase      int      `json:"logBase,omitempty"`
	Data         []string `json:"data,omitempty"`
	Min          any      `json:"min,omitempty"`
	Max          any      `json:"max,omitempty"`
	Interval     any      `json:"interval,omitempty"`
	MinInterval  any      `json:"minInterval,omitempty"`
	GridIndex    int      `json:"gridIndex"`
	Position     string   `json:"position,omitempty"`
}

// echartSeries is a line series of [x, y] points (y nil: no point).
type echartSeries struct {
	Name         string           `json:"name"`
	Type         string           `json:"type"`
	Data         [][2]any         `json:"data"`
	XAxisIndex   int              `json:"xAxisIndex"`
	YAxisIndex   int              `json:"yAxisIndex"`
	ShowSymbol   bool             `json:"showSymbol"`
	Symbol       string           `json:"symbol,omitempty"`
	SymbolSize   int              `json:"symbolSize,omitempty"`
	ConnectNulls bool             `json:"connectNulls,omitempty"`
	LineStyle    *echartLineStyle `json:"lineStyle,omitempty"`
	MarkLine     *echartMarkLine  `json:"markLine,omitempty"`
}

type echartLineStyle struct {
	Type  string `json:"type,omitempty"` // solid, dashed, dotted
	Width int    `json:"width,omitempty"`
}

// echartMarkLine marks x values on a series (the current setting).
type echartMarkLine struct {
	Symbol []string         `json:"symbol"`
	Silent bool             `json:"silent"`
	Label  echartMarkLabel  `json:"label"`
	Data   []echartMarkData `json:"data"`
}

type echartMarkLabel struct {
	Formatter string `json:"formatter"`
}

type echartMarkData struct {
	XAxis any    `json:"xAxis"`
	Name  string `json:"name,omitempty"`
}

// lineSeries is a line series on axes x and y with symbols at its points.
func lineSeries(name string, data [][2]any, x, y int) echartSeries {
	return echartSeries{Name: name, Type: "line", Data: data, XAxisIndex: x, YAxisIndex: y, ShowSymbol: true, SymbolSize: 6}
}

// markAt marks x = at on the series with label.
func markAt(at any, label string) *echartMarkLine {
	return &echartMarkLine{Symbol: []string{"none", "none"}, Silent: true, Label: echartMarkLabel{Formatter: label}, Data: []echartMarkData{{XAxis: at, Name: label}}}
}

// JSON marshals the option for ECharts' setOption.
func (o *echartOption) JSON() string {
	b, err := json.Marshal(o)
	if err != nil {
		return "{}"
	}
	return string(b)
}
