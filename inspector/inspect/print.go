package inspect

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/api"
)

// PendingLegend explains the "pending" status in plain words; the details
// view prints it when it shows a pending container, and docs/inspector.md
// repeats it.
const PendingLegend = `"pending": the gpushare scheduler extender has chosen this card and bound the pod, but the
node's device plugin has not yet given the card to the container (the kubelet has not started
it). The memory already counts as allocated; it becomes "allocated" once the container gets it.`

// PrintJSON writes v as indented JSON.
func PrintJSON(w io.Writer, v View) error { return printJSON(w, v) }

// PrintYAML writes v as YAML, with the same field names as PrintJSON.
func PrintYAML(w io.Writer, v View) error { return printYAML(w, v) }

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// printYAML writes v as YAML, with the field names of its JSON.
func printYAML(w io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding YAML: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// unitStyle decides how memory figures are written: when every node with an
// inventory uses one unit, it goes in the column header and the figures are
// bare numbers; otherwise each figure carries its node's unit.
type unitStyle struct {
	common api.MemoryUnit // set when all nodes share one unit
}

func newUnitStyle(v View) unitStyle {
	units := map[api.MemoryUnit]bool{}
	for _, n := range v.Nodes {
		if n.Unit != "" {
			units[n.Unit] = true
		}
	}
	if len(units) == 1 {
		for u := range units {
			return unitStyle{common: u}
		}
	}
	return unitStyle{}
}

// header is the node column's title: "NODE(GiB)", or "NODE" when the
// figures carry their units.
func (s unitStyle) header() string {
	if s.common != "" {
		return "NODE(" + string(s.common) + ")"
	}
	return "NODE"
}

// amount writes allocated/total for a node whose unit is u.
func (s unitStyle) amount(allocated, total int64, u api.MemoryUnit) string {
	if u == "" {
		return "-"
	}
	a := strconv.FormatInt(allocated, 10) + "/" + strconv.FormatInt(total, 10)
	if s.common == "" {
		a += " " + string(u)
	}
	return a
}

// nodeName is the node's name in the table, with what sets it apart:
// "gpu-7 (DRA)", "gpu-8 (cordoned)".
func nodeName(n Node) string {
	var marks []string
	if n.DRA {
		marks = append(marks, "DRA")
	}
	if n.Cordoned {
		marks = append(marks, "cordoned")
	}
	if len(marks) == 0 {
		return n.Name
	}
	return n.Name + " (" + strings.Join(marks, ", ") + ")"
}

// printSource names the source when it is not the API server, whose view is
// the default and needs no introduction.
func printSource(w io.Writer, v View) {
	if v.Source == SourceExtender {
		fmt.Fprintln(w, "Source: the gpushare scheduler extender's cache (binds in flight included; no addresses, cordons or kubelet figures).")
		fmt.Fprintln(w)
	}
}

func printTotals(w io.Writer, v View) {
	fmt.Fprintln(w)
	if len(v.Totals) == 0 {
		fmt.Fprintln(w, "Allocated/Total GPU Memory In Cluster: unknown (no node has a readable inventory)")
		return
	}
	for _, t := range v.Totals {
		fmt.Fprintf(w, "Allocated/Total GPU Memory In Cluster: %d/%d %s (%d%%)\n", t.Allocated, t.Total, t.Unit, t.Percent)
	}
	for _, t := range v.Totals {
		fmt.Fprintf(w, "Cards in service (healthy, not isolated): %d/%d %s (%d%%); free for new pods: %d %s, at most %d %s on one card; %s free whole\n",
			t.InServiceAllocated, t.InService, t.Unit, t.InServicePercent, t.Free, t.Unit, t.LargestFree, t.Unit, plural(t.FreeCards, "card"))
	}
}

func printWarnings(w io.Writer, v View) error {
	if len(v.Warnings) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nWarnings (%d):\n", len(v.Warnings))
	for _, x := range v.Warnings {
		fmt.Fprintf(w, "  %s: %s\n", x.Code, x.Message)
	}
	return nil
}

// PrintDetails writes, per node, its cards (index, model, UUID, state,
// allocated/total) and every container on each card, then the pods that
// could not be counted, the totals, the warnings and, when a container is
// pending, what "pending" means.
func PrintDetails(w io.Writer, names api.Names, v View, oneNode bool) error {
	names = names.OrDefault()
	if len(v.Nodes) == 0 {
		return PrintTable(w, names, v, oneNode)
	}
	printSource(w, v)
	style := unitStyle{} // figures always carry their unit here
	for i, n := range v.Nodes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := printNodeDetails(w, names, n, style, v.Source == SourceExtender); err != nil {
			return err
		}
	}
	if !oneNode {
		printTotals(w, v)
	}
	if err := printWarnings(w, v); err != nil {
		return err
	}
	if anyPending(v) {
		fmt.Fprintf(w, "\n%s\n", PendingLegend)
	}
	return nil
}

// anyPending reports whether the view shows a container as "pending".
func anyPending(v View) bool {
	for _, n := range v.Nodes {
		for _, c := range n.Cards {
			for _, p := range c.Pods {
				if p.Pending {
					return true
				}
			}
		}
	}
	return false
}

// printNodeDetails writes one node; fromExtender leaves out what the
// extender does not know (address, cordon, kubelet figures).
func printNodeDetails(w io.Writer, names api.Names, n Node, style unitStyle, fromExtender bool) error {
	kv := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintf(kv, "Node:\t%s\n", n.Name)
	if !fromExtender {
		fmt.Fprintf(kv, "Address:\t%s\n", dash(n.Address))
		if n.Cordoned {
			fmt.Fprintf(kv, "Schedulable:\tno (cordoned)\n")
		} else {
			fmt.Fprintf(kv, "Schedulable:\tyes\n")
		}
	}
	if n.Unit == "" {
		fmt.Fprintf(kv, "Allocated:\tunknown (no readable inventory)\n")
	} else {
		fmt.Fprintf(kv, "Allocated:\t%s (%d%%)\n", style.amount(n.Allocated, n.Total, n.Unit), Percent(n.Allocated, n.Total))
	}
	switch {
	case n.DRA && n.Unit != "":
		fmt.Fprintf(kv, "Served:\tthrough DRA (ResourceClaims); claims hold %d %s\n", n.Claimed, n.Unit)
	case n.DRA:
		fmt.Fprintf(kv, "Served:\tthrough DRA (ResourceClaims)\n")
	case !fromExtender:
		fmt.Fprintf(kv, "Kubelet:\t%s capacity %s, allocatable %s\n", names.ResourceName(), optInt(n.Capacity), optInt(n.Allocatable))
	}
	if n.InventoryError != "" {
		fmt.Fprintf(kv, "Inventory:\t%s\n", n.InventoryError)
	}
	if err := kv.Flush(); err != nil {
		return err
	}

	if len(n.Cards) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		// USED appears when the device plugin samples memory in use.
		sampled := false
		for _, c := range n.Cards {
			sampled = sampled || c.UsedMiB != nil
		}
		used, claimed := "", ""
		if sampled {
			used = fmt.Sprintf("\tUSED(%s)", n.Unit)
		}
		if n.DRA {
			claimed = fmt.Sprintf("\tDRA CLAIMS(%s)", n.Unit)
		}
		fmt.Fprintf(tw, "  GPU\tMODEL\tUUID\tSTATE\tALLOCATED/TOTAL(%s)%s%s\n", n.Unit, claimed, used)
		for _, c := range n.Cards {
			state := string(c.State)
			if c.Reason != "" {
				state += ": " + c.Reason
			}
			if sampled {
				used = "\t" + usedIn(n.Unit, c.UsedMiB)
			}
			if n.DRA {
				claimed = "\t" + strconv.FormatInt(c.Claimed, 10)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d/%d%s%s\n", c.Index, dash(c.Model), dash(c.UUID), state, c.Allocated, c.Total, claimed, used)
		}
		if err := tw.Flush(); err != nil {
			return err
		}

		fmt.Fprintln(w)
		pods, claims := 0, 0
		for _, c := range n.Cards {
			pods += len(c.Pods)
			claims += len(c.Claims)
		}
		switch {
		case pods+claims == 0 && n.Allocated > 0 && n.DRA:
			fmt.Fprintln(w, "  No pod or claim of the namespace asked for on this node's GPUs (the memory allocated is other namespaces').")
		case pods+claims == 0 && n.Allocated > 0:
			fmt.Fprintln(w, "  No pod of the namespace asked for on this node's GPUs (the memory allocated is other namespaces').")
		case pods+claims == 0 && n.DRA:
			fmt.Fprintln(w, "  No pods or claims on this node's GPUs.")
		case pods+claims == 0:
			fmt.Fprintln(w, "  No pods on this node's GPUs.")
		case pods == 0:
		default:
			tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
			fmt.Fprintf(tw, "  GPU\tPOD\tCONTAINER\t%s\tSTATUS\n", n.Unit)
			for _, c := range n.Cards {
				for _, p := range c.Pods {
					status := "allocated"
					if p.Pending {
						status = "pending"
					}
					units := strconv.FormatInt(p.Units, 10)
					if p.Whole {
						units = "whole"
					}
					fmt.Fprintf(tw, "  %d\t%s/%s\t%s\t%s\t%s\n", c.Index, p.Namespace, p.Name, p.Container, units, status)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if claims > 0 {
			if pods > 0 {
				fmt.Fprintln(w)
			}
			if err := printClaims(w, n); err != nil {
				return err
			}
		}
	}

	if len(n.Uncounted) > 0 {
		fmt.Fprintf(w, "\n  Not counted on any card (%d):\n", len(n.Uncounted))
		for _, u := range n.Uncounted {
			fmt.Fprintf(w, "    %s/%s: %s: %s\n", u.Namespace, u.Name, u.Code, u.Message)
		}
	}
	return nil
}

// printClaims writes the DRA claims on the node's cards, one line per
// claim and card: the pods it is reserved for, or that it is reserved for
// none (its memory is allocated all the same).
func printClaims(w io.Writer, n Node) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  GPU\tDRA CLAIM\tREQUEST\t%s\tPODS\tSTATUS\n", n.Unit)
	for _, c := range n.Cards {
		for _, cl := range c.Claims {
			status := "allocated"
			if len(cl.Pods) == 0 {
				status = "allocated, reserved for no pod"
			}
			fmt.Fprintf(tw, "  %d\t%s/%s\t%s\t%d\t%s\t%s\n", c.Index, cl.Namespace, cl.Name, dash(cl.Request), cl.Units, dash(strings.Join(cl.Pods, ",")), status)
		}
	}
	return tw.Flush()
}

// usedIn prints memory in use in the node's unit: GiB with one decimal
// (12800 MiB is "12.5"), MiB whole; "-" when not reported.
func usedIn(unit api.MemoryUnit, mib *int64) string {
	if mib == nil {
		return "-"
	}
	if unit == api.UnitMiB {
		return strconv.FormatInt(*mib, 10)
	}
	return strconv.FormatFloat(float64(*mib)/1024, 'f', 1, 64)
}

func dash(s string) string { return cmp.Or(s, "-") }

func optInt(p *int64) string {
	if p == nil {
		return "not reported"
	}
	return strconv.FormatInt(*p, 10)
}
