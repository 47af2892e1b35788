package eventlog

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector reports the log's figures whenever /metrics is scraped: the
// stream's (stored messages and bytes, first and last sequence), this
// replica's consumer's (delivered, redelivered, lag behind the stream) and
// its NATS connection's.
func (l *Log) Collector() prometheus.Collector { return collector{l} }

// collector is Log.Collector's.
type collector struct{ l *Log }

var (
	descStreamMsgs    = prometheus.NewDesc("kvscope_stream_messages", "Frames stored in the event log (JetStream stream KVSCOPE).", nil, nil)
	descStreamBytes   = prometheus.NewDesc("kvscope_stream_bytes", "Bytes stored in the event log.", nil, nil)
	descStreamLast    = prometheus.NewDesc("kvscope_stream_last_seq", "The event log's last sequence number.", nil, nil)
	descStreamFirst   = prometheus.NewDesc("kvscope_stream_first_seq", "The event log's first sequence number still kept.", nil, nil)
	descDelivered     = prometheus.NewDesc("kvscope_stream_consumer_delivered_total", "Frames delivered to this replica's consumer.", nil, nil)
	descRedelivered   = prometheus.NewDesc("kvscope_stream_consumer_redelivered", "Frames redelivered to this replica's consumer.", nil, nil)
	descLag           = prometheus.NewDesc("kvscope_stream_consumer_lag", "Frames stored that this replica's consumer has not delivered yet.", nil, nil)
	descNATSReconnect = prometheus.NewDesc("kvscope_nats_reconnects_total", "Times this replica reconnected to NATS.", nil, nil)
	descNATSIn        = prometheus.NewDesc("kvscope_nats_in_msgs_total", "Messages this replica received from NATS.", nil, nil)
	descNATSOut       = prometheus.NewDesc("kvscope_nats_out_msgs_total", "Messages this replica sent to NATS.", nil, nil)
	descForged        = prometheus.NewDesc("kvscope_bus_forged_duplicates_total", "JetStream \"duplicate\" answers for frames this replica had not stored (another message held the frame's id): each frame went again under a new id.", nil, nil)
	descNATSRefused   = prometheus.NewDesc("kvscope_nats_refused_total", "What the embedded NATS server refused its clients, by reason: a credential not the user's, connections past their bound, a publish outside one's own subject, a subscription outside one's own inbox.", []string{"reason"}, nil)
)

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStreamMsgs, descStreamBytes, descStreamLast, descStreamFirst, descDelivered, descRedelivered, descLag,
		descNATSReconnect, descNATSIn, descNATSOut, descNATSRefused, descForged} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; what NATS does not answer within
// 2 s is left out of this scrape.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descForged, prometheus.CounterValue, float64(c.l.forged.Load()))
	for reason, n := range c.l.Refused() {
		ch <- prometheus.MustNewConstMetric(descNATSRefused, prometheus.CounterValue, float64(n), reason)
	}
	st := c.l.nc.Stats()
	ch <- prometheus.MustNewConstMetric(descNATSReconnect, prometheus.CounterValue, float64(st.Reconnects))
	ch <- prometheus.MustNewConstMetric(descNATSIn, prometheus.CounterValue, float64(st.InMsgs))
	ch <- prometheus.MustNewConstMetric(descNATSOut, prometheus.CounterValue, float64(st.OutMsgs))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.l.stream.Info(ctx)
	if err != nil {
		return
	}
	s := info.State
	ch <- prometheus.MustNewConstMetric(descStreamMsgs, prometheus.GaugeValue, float64(s.Msgs))
	ch <- prometheus.MustNewConstMetric(descStreamBytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(descStreamLast, prometheus.GaugeValue, float64(s.LastSeq))
	ch <- prometheus.MustNewConstMetric(descStreamFirst, prometheus.GaugeValue, float64(s.FirstSeq))
	c.l.mu.Lock()
	f := c.l.follower
	c.l.mu.Unlock()
	if f == nil {
		return
	}
	ci, err := f.Info(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descDelivered, prometheus.CounterValue, float64(ci.Delivered.Consumer))
	ch <- prometheus.MustNewConstMetric(descRedelivered, prometheus.GaugeValue, float64(ci.NumRedelivered))
	ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(s.LastSeq-min(ci.Delivered.Stream, s.LastSeq)))
}
