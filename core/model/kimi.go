package model

import "fmt"

// kimiLinear handles Kimi-Linear (kimi_linear): KDA (Kimi Delta Attention)
// layers and MLA layers. As vLLM's kimi_linear.py and its KimiLinearConfig
// read the config, layer i is KDA when i+1 is in
// linear_attn_config.kda_layers (the list is 1-based) and MLA otherwise;
// the MLA latent is kv_lora_rank + qk_rope_head_dim per token (vLLM's
// MultiHeadLatentAttentionWrapper, mla_use_nope or not), and a KDA layer's
// state is sized by linear_attn_config's num_heads, head_dim and
// short_conv_kernel_size (get_mamba_state_shape_from_config).
func (p *parser) kimiLinear() error {
	heads, err := p.text.positive("num_attention_heads")
	if err != nil {
		return err
	}
	p.m.AttentionHeads = heads
	rank, err := p.text.positive("kv_lora_rank")
	if err != nil {
		return err
	}
	rope, err := p.text.positive("qk_rope_head_dim")
	if err != nil {
		return err
	}
	lin, ok, err := p.text.sub("linear_attn_config")
	if err != nil {
		return err
	}
	if !ok {
		return &FieldError{Field: p.text.field("linear_attn_config"), Reason: "missing: a kimi_linear config lists its KDA layers there"}
	}
	var st StateDims
	for _, f := range []struct {
		key string
		dst *int
	}{
		{"num_heads", &st.Heads},
		{"head_dim", &st.HeadDim},
		{"short_conv_kernel_size", &st.ConvKernel},
	} {
		if *f.dst, err = lin.positive(f.key); err != nil {
			return err
		}
	}
	kda, ok, err := lin.ints("kda_layers")
	if err != nil {
		return err
	}
	if !ok {
		return &FieldError{Field: lin.field("kda_layers"), Reason: "required key is missing"}
	}
	isKDA := make([]bool, p.m.HiddenLayers)
	for i, n := range kda {
		if n < 1 || n > p.m.HiddenLayers {
			return &FieldError{Field: fmt.Sprintf("%s[%d]", lin.field("kda_layers"), i), Value: fmt.Sprint(n),
				Reason: fmt.Sprintf("must be a 1-based layer number between 1 and num_hidden_layers = %d", p.m.HiddenLayers)}
		}
		if isKDA[n-1] {
			return &FieldError{Field: fmt.Sprintf("%s[%d]", lin.field("kda_layers"), i), Value: fmt.Sprint(n), Reason: "is listed twice"}
		}
		isKDA[n-1] = true
	}
	p.m.MambaAll = "unknown"
	for i := 0; i < p.m.HiddenLayers; i++ {
		if isKDA[i] {
			s := st
			p.addLayer(Layer{Index: i, Kind: KDA, State: &s})
			continue
		}
		p.addLayer(Layer{Index: i, Kind: MLA, KVHeads: 1, HeadDim: rank + rope})
	}
	if n, _, err := p.text.intValue("num_nextn_predict_layers"); err != nil {
		return err
	} else if n > 0 {
		p.note("%s = %d: kvscope does not attach Kimi-Linear MTP layers (vLLM's kimi_linear skips them in the target model)", p.text.field("num_nextn_predict_layers"), n)
	}
	return nil
}
