package usage

import "sort"

// groupShares sets Usage.Shared on the usages whose grants share memory
// (Grant.Share) with another container's on the same card: the groups are
// the connected sets of containers linked by a share; a group's grant is
// each of its shares once plus its members' own grants, its use the sum of
// its members' use.
// shares are the usages' Grant.Share, by bytes.
func groupShares(usages map[usageKey]*Usage, shares map[usageKey]map[string]int64) {
	sharesOf := map[*Usage]map[string]int64{}
	holders := map[[2]string][]*Usage{} // (card, share) → the usages granted it
	for k, byShare := range shares {
		u := usages[k]
		sharesOf[u] = byShare
		for sh := range byShare {
			hk := [2]string{u.Card, sh}
			holders[hk] = append(holders[hk], u)
		}
	}
	seen := map[*Usage]bool{}
	for _, u := range usages {
		if seen[u] || len(sharesOf[u]) == 0 {
			continue
		}
		// The group of u: a walk over shares and their holders.
		var members []*Usage
		group := map[string]int64{}
		queue := []*Usage{u}
		seen[u] = true
		for len(queue) > 0 {
			m := queue[0]
			queue = queue[1:]
			members = append(members, m)
			for sh, b := range sharesOf[m] {
				group[sh] = b
				for _, o := range holders[[2]string{m.Card, sh}] {
					if !seen[o] {
						seen[o] = true
						queue = append(queue, o)
					}
				}
			}
		}
		if len(members) < 2 {
			continue
		}
		g := &Shared{}
		for _, b := range group {
			g.GrantedBytes += b
		}
		for _, m := range members {
			own := m.GrantedBytes
			for _, b := range sharesOf[m] {
				own -= b
			}
			g.GrantedBytes += own
			g.UsedBytes += m.UsedBytes
			g.Containers = append(g.Containers, m.Ref)
			m.Shared = g
		}
		sort.Slice(g.Containers, func(a, b int) bool { return Usage{Ref: g.Containers[a]}.less(Usage{Ref: g.Containers[b]}) })
	}
}
