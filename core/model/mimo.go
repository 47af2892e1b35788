package model

import "fmt"

// mimoV2Flash handles MiMo-V2-Flash (mimo_v2_flash), as vLLM's
// mimo_v2_flash.py reads its config: layer i is sliding-window attention
// when hybrid_layer_pattern[i] is 1, with swa_num_key_value_heads heads of
// swa_head_dim (K) and swa_v_head_dim (V, head_dim when absent) and the
// window sliding_window_size; otherwise full attention with
// num_key_value_heads heads of head_dim and v_head_dim. K and V heads may
// differ in size (vLLM's head_size_v).
func (p *parser) mimoV2Flash() error {
	pattern, ok, err := p.text.ints("hybrid_layer_pattern")
	if err != nil {
		return err
	}
	if !ok {
		return &FieldError{Field: p.text.field("hybrid_layer_pattern"), Reason: "missing: a mimo_v2_flash config marks each layer 0 (full) or 1 (sliding window) there"}
	}
	if len(pattern) != p.m.HiddenLayers {
		return &FieldError{Field: p.text.field("hybrid_layer_pattern"), Value: fmt.Sprintf("[%d entries]", len(pattern)),
			Reason: fmt.Sprintf("has %d entries but num_hidden_layers is %d", len(pattern), p.m.HiddenLayers)}
	}
	dims := func(heads, kvHeads, headDim, headDimV string) (attnDims, int, error) {
		var d attnDims
		var err error
		if d.heads, err = p.text.positive(heads); err != nil {
			return d, 0, err
		}
		if d.kvHeads, err = p.text.positive(kvHeads); err != nil {
			return d, 0, err
		}
		if d.heads%d.kvHeads != 0 {
			return d, 0, p.text.errf(kvHeads, "must divide %s = %d", heads, d.heads)
		}
		if d.headDim, err = p.text.positive(headDim); err != nil {
			return d, 0, err
		}
		v, _, err := p.text.positiveOr(headDimV, d.headDim)
		return d, v, err
	}
	full, fullV, err := dims("num_attention_heads", "num_key_value_heads", "head_dim", "v_head_dim")
	if err != nil {
		return err
	}
	var swa attnDims
	var swaV, window int
	for i, t := range pattern {
		switch t {
		case 0:
			l := p.attn(i, Full, full)
			l.HeadDimV = fullV
			p.addLayer(l)
		case 1:
			if swa.heads == 0 {
				if swa, swaV, err = dims("swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim"); err != nil {
					return err
				}
				if window, err = p.text.positive("sliding_window_size"); err != nil {
					return err
				}
			}
			l := p.attn(i, Sliding, swa)
			l.HeadDimV, l.Window = swaV, window
			p.addLayer(l)
		default:
			return &FieldError{Field: fmt.Sprintf("%s[%d]", p.text.field("hybrid_layer_pattern"), i), Value: fmt.Sprint(t), Reason: "must be 0 (full attention) or 1 (sliding window)"}
		}
	}
	// Tensor parallelism must divide the query heads of both kinds.
	p.m.AttentionHeads = full.heads
	if swa.heads > 0 {
		p.m.AttentionHeads = gcdInt(full.heads, swa.heads)
	}
	if n, _, err := p.text.intValue("num_nextn_predict_layers"); err != nil {
		return err
	} else if n > 0 {
		p.note("%s = %d: kvscope does not attach MiMo's MTP layers", p.text.field("num_nextn_predict_layers"), n)
	}
	return nil
}

func gcdInt(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
