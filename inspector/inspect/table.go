package inspect

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpushare/gpushare/api"
)

// Marks after a card's figures in the default view; the legend under the
// table names those it shows.
const (
	markUnhealthy = "U"
	markIsolated  = "I"
	markWhole     = "W"
	markClaimed   = "D"
)

// PrintTable writes the default view: one row per GPU node with a column per
// card index (allocated/total), the node's allocated/total, what DRA claims
// hold on it (DRA, when a claim holds memory anywhere), memory in use when
// sampled, what new pods can still get (FREE) and the most of it on one card
// (MAX FREE); then the totals, the per-model summary and the warnings.
// oneNode leaves out the cluster lines and the model summary, for a view
// restricted to one node. Rows of 8-card nodes fit 120 columns.
func PrintTable(w io.Writer, names api.Names, v View, oneNode bool) error {
	names = names.OrDefault()
	printSource(w, v)
	if len(v.Nodes) == 0 {
		fmt.Fprintf(w, "No GPU nodes found: no node has %s capacity, a %s annotation, the %s=%s or %s=%s label, or a gpushare ResourceSlice.\n",
			names.ResourceName(), names.AnnotationInventory(), api.LabelEnabled, api.LabelEnabledValue, names.LabelDRA(), api.LabelEnabledValue)
		return printWarnings(w, v)
	}
	style := newUnitStyle(v)
	indexSet := map[int]bool{}
	sampled, claimed := false, false
	for _, n := range v.Nodes {
		for _, c := range n.Cards {
			indexSet[c.Index] = true
		}
		sampled = sampled || n.UsedMiB != nil
		claimed = claimed || n.Claimed > 0
	}
	indexes := make([]int, 0, len(indexSet))
	for i := range indexSet {
		indexes = append(indexes, i)
	}
	sort.Ints(indexes)

	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	head := []string{"NAME"}
	for _, i := range indexes {
		head = append(head, fmt.Sprintf("GPU%d", i))
	}
	head = append(head, style.header())
	if claimed {
		head = append(head, "DRA")
	}
	if sampled {
		head = append(head, "USED")
	}
	head = append(head, "FREE", "MAX FREE")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	marks := map[string]bool{}
	for _, n := range v.Nodes {
		row := []string{nodeName(n)}
		byIndex := map[int]Card{}
		for _, c := range n.Cards {
			byIndex[c.Index] = c
		}
		for _, i := range indexes {
			c, ok := byIndex[i]
			if !ok {
				row = append(row, "")
				continue
			}
			cell := style.amount(c.Allocated, c.Total, n.Unit)
			if m := cardMarks(c, marks); m != "" {
				cell += " " + m
			}
			row = append(row, cell)
		}
		row = append(row, style.amount(n.Allocated, n.Total, n.Unit))
		switch {
		case claimed && n.DRA:
			row = append(row, style.figure(n.Claimed, n.Unit))
		case claimed:
			row = append(row, "-")
		}
		if sampled {
			row = append(row, usedIn(n.Unit, n.UsedMiB))
		}
		row = append(row, style.figure(n.Free, n.Unit), style.figure(n.LargestFree, n.Unit))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printLegend(w, marks, claimed)
	if !oneNode {
		printTotals(w, v)
		if err := printModels(w, v); err != nil {
			return err
		}
	}
	return printWarnings(w, v)
}

// cardMark is the mark for a card that takes no new pods.
func cardMark(c Card) string {
	switch {
	case c.State == api.CardIsolated:
		return markIsolated
	case c.State != api.CardHealthy:
		return markUnhealthy
	case c.Whole:
		return markWhole
	}
	return ""
}

// cardMarks are a card's marks, comma-separated: cardMark's, then D when
// DRA claims hold memory on it. Each one shown is recorded in shown.
func cardMarks(c Card, shown map[string]bool) string {
	var ms []string
	if m := cardMark(c); m != "" {
		ms = append(ms, m)
	}
	if c.Claimed > 0 {
		ms = append(ms, markClaimed)
	}
	for _, m := range ms {
		shown[m] = true
	}
	return strings.Join(ms, ",")
}

// printLegend says what the columns and the marks shown mean; claimed: the
// DRA column is shown.
func printLegend(w io.Writer, marks map[string]bool, claimed bool) {
	var shown []string
	for _, m := range []struct{ mark, meaning string }{
		{markUnhealthy, "unhealthy"}, {markIsolated, "isolated"}, {markWhole, "given whole"}, {markClaimed, "DRA claims hold some of it"},
	} {
		if marks[m.mark] {
			shown = append(shown, m.mark+" "+m.meaning)
		}
	}
	cards := "GPUn: allocated/total on card n"
	if len(shown) > 0 {
		cards += " (" + strings.Join(shown, ", ") + ")"
	}
	node := "NODE: on the node"
	if claimed {
		node += "; DRA: of it, what DRA claims hold (-d lists them)"
	}
	fmt.Fprintf(w, "%s; %s.\nFREE: what new pods can still get on the node; MAX FREE: the most of it on one card.\n", cards, node)
}

// printModels writes one row per card model: how many cards, how many in
// service, how many can be given whole now, the in-service allocation, and
// what new pods can get on that model.
func printModels(w io.Writer, v View) error {
	if len(v.Models) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tNODES\tCARDS\tIN SERVICE\tFREE WHOLE\tALLOCATED/IN SERVICE\tFREE\tMAX FREE")
	for _, m := range v.Models {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d/%d %s (%d%%)\t%d %s\t%d %s\n", m.Model, m.Nodes, m.Cards, m.InServiceCards, m.FreeCards,
			m.InServiceAllocated, m.InService, m.Unit, Percent(m.InServiceAllocated, m.InService), m.Free, m.Unit, m.LargestFree, m.Unit)
	}
	return tw.Flush()
}

// figure writes one amount for a node whose unit is u ("-" when unknown).
func (s unitStyle) figure(n int64, u api.MemoryUnit) string {
	if u == "" {
		return "-"
	}
	f := strconv.FormatInt(n, 10)
	if s.common == "" {
		f += " " + string(u)
	}
	return f
}
