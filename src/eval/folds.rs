//! Stratified, seeded folds for cross-validated figures.

use super::input::LabelledRun;
use std::collections::BTreeMap;

/// Stratified fold of each labelled run: runs are grouped by (label, kind), each group shuffled
/// with `seed`, and the groups dealt in turn, so every fold gets its share of each kind (±1)
/// and the folds' sizes differ by at most one.
pub fn assign_folds(runs: &[LabelledRun], folds: usize, seed: u64) -> Vec<usize> {
    let mut strata: BTreeMap<(bool, String), Vec<usize>> = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        strata
            .entry((r.label, r.kind.clone().unwrap_or_default()))
            .or_default()
            .push(i);
    }
    let mut rng = SplitMix64(seed);
    let mut out = vec![0; runs.len()];
    let mut dealt = 0usize;
    for (_, mut members) in strata {
        // Fisher–Yates.
        for i in (1..members.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            members.swap(i, j);
        }
        for m in members {
            out[m] = dealt % folds.max(1);
            dealt += 1;
        }
    }
    out
}

/// A small seeded generator (SplitMix64): folds must be reproducible from `--seed` alone.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
