package inspect

// The DRA side of Build: the cards of a node served through DRA and the
// claims allocated on them, from api.Names.DRAUsage.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/api"
)

// sliceCards gives a DRA node without a readable inventory the cards of
// its ResourceSlice, in the slice's unit. Their Total is the memory the
// slice offers until placeClaims adds back what device-plugin pods hold.
// Without a slice (only claims name the node) its cards are unknown.
func (b *nodeBuild) sliceCards(n *corev1.Node, warn func(WarningCode, string, ...any)) {
	d := b.dra
	if !d.Sliced {
		b.view.InventoryError = fmt.Sprintf("no gpushare ResourceSlice and no readable %s annotation", b.names.AnnotationInventory())
		why := "it has no gpushare ResourceSlice: the node agent in DRA mode has published nothing (is it running on the node?)"
		if b.draUnreadable {
			why = "its gpushare ResourceSlice could not be read (see " + string(WarnDRAUnreadable) + ")"
		}
		warn(WarnNoInventory, "node %s is served through DRA (labelled %s=%s, or claims are allocated on it) but %s, and it has no readable %s annotation; its cards and unit are unknown and it is left out of the totals",
			n.Name, b.names.LabelDRA(), api.LabelEnabledValue, why, b.names.AnnotationInventory())
		return
	}
	iso := isolation(b.names, n, warn)
	b.sliced, b.hasInv = true, true
	b.inv = api.Inventory{Unit: d.Unit}
	b.view.Unit = d.Unit
	for _, c := range d.Cards {
		shown := iso.Apply(api.Card{Index: c.Index, UUID: c.UUID, Model: c.Model, State: c.State, Reason: c.Reason})
		b.cardPos[c.UUID] = len(b.view.Cards)
		b.view.Cards = append(b.view.Cards, Card{Index: c.Index, UUID: c.UUID, Model: c.Model, State: shown.State, Reason: shown.Reason, Total: c.Offered, Pods: []Pod{}})
	}
}

// sliceState is c with the state the node's ResourceSlice gives it, when
// the slice lists it: on a node moved from the device plugin to DRA the
// inventory is the device plugin's last, the slice is current.
func sliceState(d *api.DRANode, c api.Card) api.Card {
	if d == nil {
		return c
	}
	for _, dc := range d.Cards {
		if dc.Index == c.Index && dc.UUID == c.UUID {
			c.State, c.Reason = dc.State, dc.Reason
		}
	}
	return c
}

// placeClaims puts the DRA claims allocated on the node on its cards, once
// its pods are placed: a claim's memory counts in the card's Allocated
// (and Claimed), whether or not the claim is reserved for a pod. A card
// taken from the slice gets its memory back as Total: what the slice
// offers plus what device-plugin pods hold on it, which the node agent
// withholds. A claim on a card the node does not list is not counted.
func (b *nodeBuild) placeClaims(warnings *[]Warning) {
	d := b.dra
	if d == nil {
		return
	}
	if b.sliced {
		for i := range b.view.Cards {
			b.view.Cards[i].Total += b.view.Cards[i].Allocated
		}
	}
	byIndex := map[int]int{}
	for i, c := range b.view.Cards {
		byIndex[c.Index] = i
	}
	place := func(s api.DRAShare, uuid string) {
		index, ok := api.DRACardIndex(s.Device)
		pos, known := byIndex[index]
		if !ok || !known || (uuid != "" && b.view.Cards[pos].UUID != uuid) {
			msg := claimNotCounted(s.Namespace, s.Name, s.Request, s.Memory.String(), s.Device, d.Name, b.view.Unit != "")
			b.view.Uncounted = append(b.view.Uncounted, Uncounted{Namespace: s.Namespace, Name: s.Name, Claim: true, Code: WarnUnknownCard, Message: msg})
			*warnings = append(*warnings, Warning{Node: d.Name, Claim: s.Namespace + "/" + s.Name, Code: WarnUnknownCard, Message: msg})
			return
		}
		card := &b.view.Cards[pos]
		units := s.Units(b.view.Unit)
		card.Allocated += units
		card.Claimed += units
		card.Claims = append(card.Claims, Claim{Namespace: s.Namespace, Name: s.Name, Request: s.Request, Units: units, ShareID: s.ShareID, Pods: append([]string{}, s.Pods...)})
	}
	for _, dc := range d.Cards {
		for _, s := range dc.Claims {
			place(s, dc.UUID)
		}
	}
	for _, s := range d.Unplaced {
		place(s, "")
	}
}

// claimNotCounted says that a claim's share of device on node is not
// counted: the node does not list that card, or (cardsKnown false) its
// cards are unknown.
func claimNotCounted(namespace, name, request, memory, device, node string, cardsKnown bool) string {
	why := "whose cards are unknown"
	if cardsKnown {
		why = "whose gpushare ResourceSlice and inventory do not list that card"
	}
	return fmt.Sprintf("claim %s/%s (request %s) is allocated %s of %s on node %s, %s; not counted", namespace, name, request, memory, device, node, why)
}

// claimsOffNodes warns about the claims allocated on nodes that do not
// exist: they are not counted.
func claimsOffNodes(dra map[string]*api.DRANode, known map[string]bool, warnings *[]Warning) {
	for _, d := range dra {
		if known[d.Name] {
			continue
		}
		shares := append([]api.DRAShare{}, d.Unplaced...)
		for _, c := range d.Cards {
			shares = append(shares, c.Claims...)
		}
		for _, s := range shares {
			*warnings = append(*warnings, Warning{Node: d.Name, Claim: s.Namespace + "/" + s.Name, Code: WarnNodeUnusable,
				Message: fmt.Sprintf("claim %s/%s is allocated %s of %s on node %s, which does not exist; not counted", s.Namespace, s.Name, s.Memory.String(), s.Device, d.Name)})
		}
	}
}

// pointers are pointers to the elements of xs.
func pointers[T any](xs []T) []*T {
	out := make([]*T, len(xs))
	for i := range xs {
		out[i] = &xs[i]
	}
	return out
}
