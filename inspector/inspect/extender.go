package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/api"
)

// maxExtenderBody bounds the extender's answer (64 MiB is far beyond any
// cluster's /inspect).
const maxExtenderBody = 64 << 20

// FromExtender asks the scheduler extender at base (e.g.
// "http://10.0.0.5:39998", the admin port of an extender pod) for its view: GET
// base/inspect, or base/inspect/NODE when node is set. This is what the
// extender decides with, assumed binds included; it knows nothing of node
// addresses, cordons or kubelet figures, so those stay empty and the node
// health checks that need them are not made.
func FromExtender(ctx context.Context, client *http.Client, base, node string) (View, error) {
	u := strings.TrimRight(base, "/") + "/inspect"
	if node != "" {
		u += "/" + url.PathEscape(node)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return View{}, fmt.Errorf("extender URL %q: %w", base, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return View{}, fmt.Errorf("cannot reach the gpushare extender: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxExtenderBody))
	if err != nil {
		return View{}, fmt.Errorf("reading the gpushare extender's answer from %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.ExtenderError
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if resp.StatusCode == http.StatusNotFound && node != "" {
			return View{}, fmt.Errorf("node %q: %w (the extender at %s says: %s)", node, ErrNodeNotFound, base, msg)
		}
		return View{}, fmt.Errorf("the gpushare extender at %s answered %s: %s", u, resp.Status, msg)
	}

	var nodes []api.ExtenderNode
	if node != "" {
		var one api.ExtenderNode
		err = json.Unmarshal(body, &one)
		nodes = []api.ExtenderNode{one}
	} else {
		err = json.Unmarshal(body, &nodes)
	}
	if err != nil {
		return View{}, fmt.Errorf("the gpushare extender at %s answered JSON this inspector does not read: %w", u, err)
	}
	return viewFromExtender(nodes, draWarnings(resp.Header)), nil
}

// draWarnings are the Warning headers of an /inspect answer that say the
// extender could not show the DRA claims (api.ExtenderWarningDRAUnreadable),
// as View warnings.
func draWarnings(h http.Header) []Warning {
	var out []Warning
	for _, v := range h.Values("Warning") {
		text, ok := strings.CutPrefix(v, "299 - ")
		if !ok {
			continue
		}
		if t, err := strconv.Unquote(text); err == nil {
			text = t
		}
		if msg, ok := strings.CutPrefix(text, api.ExtenderWarningDRAUnreadable+": "); ok {
			out = append(out, Warning{Code: WarnDRAUnreadable, Message: msg + "; DRA claims are not counted (as the extender sees it)"})
		}
	}
	return out
}

// viewFromExtender converts the extender's nodes into a View, with
// warnings of the answer's own. A card's Allocated is the extender's Used
// (what it decides with, and what DRA claims hold); a node the extender
// knows without cards, unit, inventory error or DRA is a CPU node and is
// left out.
func viewFromExtender(in []api.ExtenderNode, warnings []Warning) View {
	v := View{Version: ViewVersion, Source: SourceExtender, Nodes: []Node{}, Totals: []Total{}, Warnings: append([]Warning{}, warnings...)}
	for _, en := range in {
		if en.Unit == "" && en.InventoryError == "" && len(en.Cards) == 0 && len(en.Unplaced) == 0 && !en.DRA {
			continue
		}
		n := Node{Name: en.Name, Unit: en.Unit, InventoryError: en.InventoryError, DRA: en.DRA, Cards: []Card{}, Uncounted: []Uncounted{}}
		if en.InventoryError != "" {
			code := WarnInvalidInventory // also from an extender that sends no code
			switch en.InventoryErrorCode {
			case api.InventoryErrorMissing, api.InventoryErrorIsolation:
				code = WarningCode(en.InventoryErrorCode)
			}
			v.Warnings = append(v.Warnings, Warning{Node: n.Name, Code: code, Message: en.InventoryError + " (as the extender sees it)"})
			n.Unit = "" // no usable inventory: no unit, left out of the totals
		}
		for _, ec := range en.Cards {
			c := Card{Index: ec.Index, UUID: ec.UUID, Model: ec.Model, State: ec.State, Reason: ec.Reason, Allocated: ec.Used, Total: ec.Capacity, Whole: ec.Whole, Pods: []Pod{}}
			for _, p := range ec.Pods {
				pod := newPod(p.Namespace, p.Name, p.Container, p.Units, p.Phase)
				pod.Whole = p.Whole
				c.Pods = append(c.Pods, pod)
			}
			for _, cl := range ec.Claims {
				c.Claimed += cl.Units
				c.Claims = append(c.Claims, Claim{Namespace: cl.Namespace, Name: cl.Name, Request: cl.Request, Units: cl.Units, ShareID: cl.ShareID, Pods: append([]string{}, cl.Pods...)})
			}
			n.Cards = append(n.Cards, c)
		}
		for _, p := range en.Unplaced {
			msg := fmt.Sprintf("pod %s/%s container %s: the extender holds %d %s for it on a card node %s's inventory does not list; not counted",
				p.Namespace, p.Name, p.Container, p.Units, en.Unit, n.Name)
			n.Uncounted = append(n.Uncounted, Uncounted{Namespace: p.Namespace, Name: p.Name, Container: p.Container, Code: WarnUnknownCard, Message: msg})
			v.Warnings = append(v.Warnings, Warning{Node: n.Name, Pod: p.Namespace + "/" + p.Name, Code: WarnUnknownCard, Message: msg})
		}
		for _, cl := range en.UnplacedClaims {
			msg := claimNotCounted(cl.Namespace, cl.Name, cl.Request, cl.Memory.String(), cl.Device, n.Name, n.Unit != "")
			n.Uncounted = append(n.Uncounted, Uncounted{Namespace: cl.Namespace, Name: cl.Name, Claim: true, Code: WarnUnknownCard, Message: msg})
			v.Warnings = append(v.Warnings, Warning{Node: n.Name, Claim: cl.Namespace + "/" + cl.Name, Code: WarnUnknownCard, Message: msg})
		}
		v.Nodes = append(v.Nodes, n)
	}
	v.finish()
	return v
}
