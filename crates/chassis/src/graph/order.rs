//! Slot order for locality: the permutation a compaction that keeps the graph lays its slots
//! out in, so that the nodes a search expands one after another, and the neighbors it reads
//! from each, sit near each other in the file.
//!
//! A search's cost at layer 0 is mostly misses: one neighbor list per expanded node and one
//! code (or vector) per neighbor. In insertion order a node's neighbors are scattered over the
//! whole file: every one is a miss of its own, in a page of its own. Numbered in breadth-first
//! order from the entry point, the neighbors a node discovered are consecutive slots, and the
//! nodes one hop apart are numbered close together (Coleman et al., "Graph Reordering for
//! Cache-Efficient Near Neighbor Search", 2022, measure BFS-like orders among the best for
//! HNSW): neighboring codes share cache lines' prefetches and pages.
//!
//! **Invariant kept: support** ([`super::support`]). Rank is (−level, slot), so a
//! permutation may turn a supporter into a node that no longer outranks what it supports.
//! [`locality_order`] numbers the nodes with upper layers first, by level from the top and, in
//! a level, in their old slot order (a same-level supporter keeps its lower slot); then the
//! level-0 nodes in breadth-first order over layer-0 lists, so each one's discoverer lists it
//! and either has upper layers or was numbered before it. So every supporter relation the
//! renumbered graph needs exists, and the entry point (the lowest rank) becomes slot 0.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use super::{GraphStore, EMPTY};

/// The new order of slots `0..count`: `order[j]` is the old slot that becomes slot `j`. A
/// permutation of `0..count`: a node no layer-0 path from `entry` reaches (none, in a graph
/// that keeps the support invariant) follows in its old order.
pub fn locality_order<S: GraphStore>(store: &S, count: u32, entry: u32) -> Vec<u32> {
    let n = count as usize;
    let mut order = Vec::with_capacity(n);
    let mut upper: Vec<(usize, u32)> = (0..count)
        .filter_map(|s| {
            let level = store.level(s);
            (level > 0).then_some((level, s))
        })
        .collect();
    upper.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    order.extend(upper.iter().map(|&(_, s)| s));
    let mut seen = vec![false; n];
    let mut queue = VecDeque::new();
    if entry < count {
        seen[entry as usize] = true;
        queue.push_back(entry);
    }
    while let Some(node) = queue.pop_front() {
        if store.level(node) == 0 {
            order.push(node);
        }
        for w in store.level0(node).into_iter().flatten() {
            let nb = w.load(Ordering::Relaxed);
            if nb != EMPTY && nb < count && !seen[nb as usize] {
                seen[nb as usize] = true;
                queue.push_back(nb);
            }
        }
    }
    // Unreached level-0 nodes (a damaged graph), in their old order; upper ones are placed.
    order.extend((0..count).filter(|&s| !seen[s as usize] && store.level(s) == 0));
    order
}

/// The inverse of an order: `new_slot[old]` is the slot `old` becomes.
pub fn inverse(order: &[u32]) -> Vec<u32> {
    let mut new_slot = vec![EMPTY; order.len()];
    for (j, &old) in order.iter().enumerate() {
        new_slot[old as usize] = j as u32;
    }
    new_slot
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::support::outranks;
    use std::sync::atomic::AtomicU32;

    /// Lists only (no vectors): layer-0 lists of any length, a level per node.
    struct Lists {
        levels: Vec<usize>,
        level0: Vec<Vec<AtomicU32>>,
        upper: Vec<AtomicU32>,
    }

    impl GraphStore for Lists {
        fn routing_count(&self) -> u32 {
            self.levels.len() as u32
        }
        fn vector(&self, _: u32) -> Option<crate::graph::VectorRef<'_>> {
            None
        }
        fn level0(&self, slot: u32) -> Option<&[AtomicU32]> {
            self.level0.get(slot as usize).map(|l| &l[..])
        }
        fn upper(&self, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
            (layer >= 1 && layer <= self.levels[slot as usize]).then_some(&self.upper[..])
        }
    }

    fn words(list: &[u32]) -> Vec<AtomicU32> {
        list.iter().map(|&s| AtomicU32::new(s)).collect()
    }

    /// A graph that keeps the support invariant: every node but the lowest-ranked is listed
    /// by one random node of lower rank, plus random edges anywhere.
    fn supported_graph(n: u32, seed: u64) -> Lists {
        let mut rng = seed;
        let mut next = move |below: u32| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % u64::from(below)) as u32
        };
        let levels: Vec<usize> = (0..n)
            .map(|_| match next(64) {
                0 => 2,
                1..=4 => 1,
                _ => 0,
            })
            .collect();
        let mut by_rank: Vec<u32> = (0..n).collect();
        by_rank.sort_by_key(|&s| (std::cmp::Reverse(levels[s as usize]), s));
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
        for (i, &x) in by_rank.iter().enumerate().skip(1) {
            let y = by_rank[next(i as u32) as usize];
            lists[y as usize].push(x);
            for _ in 0..3 {
                let z = next(n);
                if z != x {
                    lists[x as usize].push(z);
                }
            }
        }
        Lists {
            levels,
            level0: lists.iter().map(|l| words(l)).collect(),
            upper: words(&[EMPTY]),
        }
    }

    fn supported(g: &Lists, x: u32) -> bool {
        (0..g.routing_count()).any(|y| {
            y != x
                && outranks(g, y, x)
                && g.level0[y as usize]
                    .iter()
                    .any(|w| w.load(Ordering::Relaxed) == x)
        })
    }

    #[test]
    fn the_order_is_a_permutation_that_keeps_every_supporter() {
        for seed in 1..6 {
            let g = supported_graph(1_500, seed);
            let entry = (0..g.routing_count())
                .min_by_key(|&s| (std::cmp::Reverse(g.levels[s as usize]), s))
                .unwrap_or(0);
            assert!((0..g.routing_count()).all(|x| x == entry || supported(&g, x)));
            let order = locality_order(&g, g.routing_count(), entry);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..g.routing_count()).collect::<Vec<_>>());
            assert_eq!(order[0], entry, "the entry point becomes slot 0");
            let new_slot = inverse(&order);
            let renumbered = Lists {
                levels: order.iter().map(|&o| g.levels[o as usize]).collect(),
                level0: order
                    .iter()
                    .map(|&o| {
                        let l = &g.level0[o as usize];
                        words(
                            &l.iter()
                                .map(|w| new_slot[w.load(Ordering::Relaxed) as usize])
                                .collect::<Vec<_>>(),
                        )
                    })
                    .collect(),
                upper: words(&[EMPTY]),
            };
            for x in 1..renumbered.routing_count() {
                assert!(
                    supported(&renumbered, x),
                    "seed {seed}: slot {x} lost its supporter"
                );
            }
        }
    }

    #[test]
    fn level0_nodes_come_in_breadth_first_order_after_the_upper_ones() {
        // 6 has upper layers: it comes first, though 0 is the entry (as a damaged graph's
        // would be); then what 0 discovered (4, 2, which come before what 4 discovered), and
        // 7, which no path reaches, last.
        let lists: [&[u32]; 8] = [&[4, 2], &[], &[5, 0], &[], &[1, 3, 2], &[6], &[], &[]];
        let g = Lists {
            levels: vec![0, 0, 0, 0, 0, 0, 1, 0],
            level0: lists.iter().map(|l| words(l)).collect(),
            upper: words(&[EMPTY]),
        };
        assert_eq!(locality_order(&g, 8, 0), vec![6, 0, 4, 2, 1, 3, 5, 7]);
        assert_eq!(inverse(&[2, 0, 1]), vec![1, 2, 0]);
    }
}
