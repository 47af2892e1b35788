package plan

// Change is one layer whose placement differs between two plans.
type Change struct {
	Layer     string `json:"layer"`
	FromGroup int    `json:"from_group"` // -1 when the layer is absent
	ToGroup   int    `json:"to_group"`
	FromSlot  int    `json:"from_slot"`
	ToSlot    int    `json:"to_slot"`
	FromBlock int    `json:"from_block_size"`
	ToBlock   int    `json:"to_block_size"`
}

// Diff compares two plans layer by layer.
type Diff struct {
	SameLayout     bool     `json:"same_layout"`      // same groups with the same layers in the same slots
	SameBlockSizes bool     `json:"same_block_sizes"` // every layer has the same block size on both sides
	Changes        []Change `json:"changes"`          // layers that change group, slot or block size
}

// Compare reports which layers change group, slot or block size from a to b.
func Compare(a, b *Plan) Diff {
	d, _ := compare(a, b, true)
	return d
}

// Changes is Compare's verdict without its list: whether the layouts and
// the block sizes agree, how many layers change group, slot or block size,
// and how many of those change group or slot.
type Changes struct {
	SameLayout, SameBlockSizes bool
	Changed, Moved             int
}

// CountChanges is Compare without the list.
func CountChanges(a, b *Plan) Changes {
	_, n := compare(a, b, false)
	return n
}

// compare is Compare, listing the changes when list says so and counting
// them either way.
func compare(a, b *Plan, list bool) (Diff, Changes) {
	var d Diff
	n := Changes{SameLayout: true, SameBlockSizes: true}
	change := func(c Change) {
		n.Changed++
		if c.FromGroup != c.ToGroup || c.FromSlot != c.ToSlot {
			n.Moved++
		}
		if list {
			d.Changes = append(d.Changes, c)
		}
	}
	for _, la := range a.Layers {
		lb, ok := b.LayerByName(la.Name)
		if !ok {
			n.SameLayout, n.SameBlockSizes = false, false
			change(Change{Layer: la.Name, FromGroup: la.Group, ToGroup: -1, FromSlot: la.Slot, ToSlot: -1, FromBlock: la.Block})
			continue
		}
		layout := la.Group == lb.Group && la.Slot == lb.Slot
		block := la.Block == lb.Block
		n.SameLayout = n.SameLayout && layout
		n.SameBlockSizes = n.SameBlockSizes && block
		if !layout || !block {
			change(Change{Layer: la.Name, FromGroup: la.Group, ToGroup: lb.Group, FromSlot: la.Slot, ToSlot: lb.Slot, FromBlock: la.Block, ToBlock: lb.Block})
		}
	}
	for _, lb := range b.Layers {
		if _, ok := a.LayerByName(lb.Name); !ok {
			n.SameLayout, n.SameBlockSizes = false, false
			change(Change{Layer: lb.Name, FromGroup: -1, ToGroup: lb.Group, FromSlot: -1, ToSlot: lb.Slot, ToBlock: lb.Block})
		}
	}
	if len(a.Groups) != len(b.Groups) {
		n.SameLayout = false
	}
	d.SameLayout, d.SameBlockSizes = n.SameLayout, n.SameBlockSizes
	return d, n
}
