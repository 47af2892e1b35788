// Package agent is the kvscope agent: GPU discovery, transfer backends and
// the event stream to the kvscope server.
package agent
