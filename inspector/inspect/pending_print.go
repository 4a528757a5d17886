package inspect

import (
	"cmp"
	"fmt"
	"io"
	"text/tabwriter"
)

// PrintPending writes the pending view: per pod, what it asks for, what
// the scheduler says, and the smallest change found that would place it.
func PrintPending(w io.Writer, pv PendingView) error {
	if len(pv.Pods) == 0 {
		_, err := fmt.Fprintln(w, "No GPU pod is waiting for a node.")
		return err
	}
	for i, p := range pv.Pods {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s/%s asks %s\n", p.Namespace, p.Name, p.Asks)
		tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
		said := p.Scheduler
		said = cmp.Or(said, "nothing yet (it has not tried the pod, or no running scheduler has the pod's schedulerName)")
		fmt.Fprintf(tw, "  scheduler:\t%s\n", said)
		fmt.Fprintf(tw, "  to place it:\t%s\n", p.Change.Message)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\n%s waiting for a node.\n", plural(len(pv.Pods), "GPU pod"))
	return err
}
