package app

import "encoding/json"

// lineOption is an ECharts option of line series, as ECharts' setOption
// takes it, with the fields kvscope's line charts use. It is written with
// encoding/json, which app.wasm links anyway: go-echarts, which wrote
// these options before, linked its HTML templates (and with them
// text/template and html/template) into app.wasm, about 100 kB gzipped.
type lineOption struct {
	// Animation is false for charts redrawn every second (nil: ECharts'
	// default).
	Animation any        `json:"animation,omitempty"`
	Title     chartTitle `json:"title"`
	Tooltip   struct {
		Show    bool   `json:"show"`
		Trigger string `json:"trigger"`
	} `json:"tooltip"`
	Legend struct {
		Show bool   `json:"show"`
		Top  string `json:"top"`
	} `json:"legend"`
	Grid   []gridBox    `json:"grid,omitempty"`
	XAxis  []chartAxis  `json:"xAxis"`
	YAxis  []chartAxis  `json:"yAxis"`
	Series []lineSeries `json:"series"`
}

type chartTitle struct {
	Text string `json:"text"`
}

// gridBox places one grid of axes (ECharts' units: pixels or "30%").
type gridBox struct {
	Top    string `json:"top,omitempty"`
	Bottom string `json:"bottom,omitempty"`
	Left   string `json:"left,omitempty"`
	Right  string `json:"right,omitempty"`
	Height string `json:"height,omitempty"`
}

// chartAxis is an x or y axis.
type chartAxis struct {
	Name      string   `json:"name,omitempty"`
	Type      string   `json:"type,omitempty"` // category, value, log or time
	Data      []string `json:"data,omitempty"` // a category axis's labels
	GridIndex int      `json:"gridIndex,omitempty"`
	Position  string   `json:"position,omitempty"`
	Min       any      `json:"min,omitempty"`
	Max       any      `json:"max,omitempty"`
}

// lineSeries is one line: its points' values (nil where there is none).
type lineSeries struct {
	Name       string       `json:"name"`
	Type       string       `json:"type"`
	XAxisIndex int          `json:"xAxisIndex,omitempty"`
	YAxisIndex int          `json:"yAxisIndex,omitempty"`
	ShowSymbol any          `json:"showSymbol,omitempty"`
	Data       []chartPoint `json:"data"`
}

// chartPoint is a point's value: a number on a category axis, [x, y] on
// a time axis, nil for a gap.
type chartPoint struct {
	Value any `json:"value"`
}

// newLineOption is a line chart's option with a title, an axis tooltip
// and a legend top px from the top.
func newLineOption(title, legendTop string) *lineOption {
	o := &lineOption{Title: chartTitle{Text: title}}
	o.Tooltip.Show, o.Tooltip.Trigger = true, "axis"
	o.Legend.Show, o.Legend.Top = true, legendTop
	return o
}

// add appends a line of the points.
func (o *lineOption) add(name string, pts []chartPoint) *lineSeries {
	o.Series = append(o.Series, lineSeries{Name: name, Type: "line", Data: pts})
	return &o.Series[len(o.Series)-1]
}

// JSON is the option for ECharts' setOption.
func (o *lineOption) JSON() string {
	b, err := json.Marshal(o)
	if err != nil {
		return "{}"
	}
	return string(b)
}
