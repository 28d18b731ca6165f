//! Ranking metrics for one scorer over labelled items: ROC-AUC, average precision, the confusion
//! at a threshold, and the operating points calibration reports.
//!
//! Conventions every calibration report follows:
//!
//! - `score >= threshold` predicts positive ("the same thing, reworded").
//! - A score of `-inf` means the scorer rules the item out at every threshold (loopguard's numbers
//!   guard: two texts whose numbers differ are never the same); `+inf` means it is positive at
//!   every threshold (equal after normalisation). They rank below / above every finite score, and
//!   no operating point has either as its threshold.
//! - What is undefined is `None` (JSON `null`), never NaN: ROC-AUC with one class only, precision
//!   when nothing is predicted positive, recall without positives, FPR without negatives.

use serde::Serialize;

/// Predictions at one threshold against the labels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Confusion {
    pub tp: usize,
    pub fp: usize,
    pub tn: usize,
    #[serde(rename = "fn")]
    pub fn_: usize,
}

fn ratio(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

impl Confusion {
    pub fn positives(&self) -> usize {
        self.tp + self.fn_
    }

    pub fn negatives(&self) -> usize {
        self.fp + self.tn
    }

    /// Undefined when nothing is predicted positive.
    pub fn precision(&self) -> Option<f64> {
        ratio(self.tp, self.tp + self.fp)
    }

    /// Undefined without positives.
    pub fn recall(&self) -> Option<f64> {
        ratio(self.tp, self.positives())
    }

    /// False-positive rate; undefined without negatives.
    pub fn fpr(&self) -> Option<f64> {
        ratio(self.fp, self.negatives())
    }

    /// `2TP / (2TP + FP + FN)`: the harmonic mean of precision and recall, written so that it is
    /// defined (0) when nothing is predicted positive. Undefined without positives.
    pub fn f1(&self) -> Option<f64> {
        (self.positives() > 0).then(|| {
            let tp2 = 2.0 * self.tp as f64;
            tp2 / (tp2 + (self.fp + self.fn_) as f64)
        })
    }
}

/// A confusion with its derived rates, as reports show it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    #[serde(flatten)]
    pub confusion: Confusion,
    pub precision: Option<f64>,
    pub recall: Option<f64>,
    pub f1: Option<f64>,
    pub fpr: Option<f64>,
}

impl From<Confusion> for Rates {
    fn from(c: Confusion) -> Self {
        Rates {
            confusion: c,
            precision: c.precision(),
            recall: c.recall(),
            f1: c.f1(),
            fpr: c.fpr(),
        }
    }
}

/// A threshold chosen by a rule, with what it does on the data it was chosen on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OperatingPoint {
    /// The lowest score predicted positive: the exact cut on this data.
    pub threshold: f64,
    /// A short decimal that makes the same predictions on this data (it lies between the
    /// threshold and the next lower score), for a config file. Chosen near the middle of that gap,
    /// so it does not sit on one observed score.
    pub config_value: f64,
    #[serde(flatten)]
    pub rates: Rates,
}

/// One distinct score and the predictions when it is the threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurvePoint {
    pub threshold: f64,
    /// The next lower distinct score (`-inf` below the lowest).
    pub next_lower: f64,
    pub confusion: Confusion,
}

/// Labelled scores, ranked from the highest score down.
#[derive(Debug, Clone)]
pub struct Ranked {
    /// (score, is positive), highest score first.
    items: Vec<(f64, bool)>,
    /// `positives_before[i]`: positives among `items[..i]`.
    positives_before: Vec<usize>,
    positives: usize,
}

impl Ranked {
    /// NaN would poison every comparison; it is treated like `-inf` (ruled out). `-0.0` is `0.0`
    /// so the two tie.
    pub fn new(items: impl IntoIterator<Item = (f64, bool)>) -> Self {
        let mut items: Vec<(f64, bool)> = items
            .into_iter()
            .map(|(s, l)| {
                let s = if s.is_nan() {
                    f64::NEG_INFINITY
                } else if s == 0.0 {
                    0.0
                } else {
                    s
                };
                (s, l)
            })
            .collect();
        items.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut positives_before = Vec::with_capacity(items.len() + 1);
        let mut n = 0;
        positives_before.push(0);
        for (_, l) in &items {
            n += usize::from(*l);
            positives_before.push(n);
        }
        Ranked {
            items,
            positives_before,
            positives: n,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn positives(&self) -> usize {
        self.positives
    }

    pub fn negatives(&self) -> usize {
        self.items.len() - self.positives
    }

    /// Scores of the positives or of the negatives (for histograms).
    pub fn scores(&self, positive: bool) -> impl Iterator<Item = f64> + '_ {
        self.items
            .iter()
            .filter(move |(_, l)| *l == positive)
            .map(|(s, _)| *s)
    }

    /// Predictions with `score >= threshold`.
    pub fn confusion_at(&self, threshold: f64) -> Confusion {
        let predicted = self.items.partition_point(|(s, _)| *s >= threshold);
        let tp = self.positives_before[predicted];
        let fp = predicted - tp;
        Confusion {
            tp,
            fp,
            fn_: self.positives - tp,
            tn: self.negatives() - fp,
        }
    }

    /// One point per distinct score, highest first; ties are one point (a threshold cannot
    /// separate them). Includes the `-inf` group, if any, last.
    pub fn curve(&self) -> Vec<CurvePoint> {
        let mut out: Vec<CurvePoint> = Vec::new();
        let mut i = 0;
        while i < self.items.len() {
            let s = self.items[i].0;
            let mut j = i;
            while j < self.items.len() && self.items[j].0 == s {
                j += 1;
            }
            if let Some(prev) = out.last_mut() {
                prev.next_lower = s;
            }
            let tp = self.positives_before[j];
            out.push(CurvePoint {
                threshold: s,
                next_lower: f64::NEG_INFINITY,
                confusion: Confusion {
                    tp,
                    fp: j - tp,
                    fn_: self.positives - tp,
                    tn: self.negatives() - (j - tp),
                },
            });
            i = j;
        }
        out
    }

    /// Area under the ROC curve: the probability that a random positive scores above a random
    /// negative, a tie counting one half (the Mann–Whitney U over `positives × negatives`).
    /// Undefined with one class only.
    pub fn roc_auc(&self) -> Option<f64> {
        let (p, n) = (self.positives(), self.negatives());
        if p == 0 || n == 0 {
            return None;
        }
        let mut negatives_above = 0usize;
        let mut u2 = 0u128; // twice U, to keep the half credits exact
        let mut prev = Confusion::default();
        for point in self.curve() {
            let c = point.confusion;
            let (gp, gn) = (c.tp - prev.tp, c.fp - prev.fp);
            // Each positive in this tie group beats every negative below the group and ties
            // with the negatives inside it.
            let below = n - negatives_above - gn;
            u2 += (gp as u128) * (2 * below as u128 + gn as u128);
            negatives_above += gn;
            prev = c;
        }
        Some(u2 as f64 / 2.0 / (p as f64 * n as f64))
    }

    /// Average precision: Σ (Rₖ − Rₖ₋₁) · Pₖ over the distinct thresholds from the highest down,
    /// ties grouped (what scikit-learn's `average_precision_score` computes). Undefined without
    /// positives.
    pub fn average_precision(&self) -> Option<f64> {
        if self.positives == 0 {
            return None;
        }
        let mut ap = 0.0;
        let mut prev_tp = 0;
        for point in self.curve() {
            let c = point.confusion;
            let gained = c.tp - prev_tp;
            if gained > 0 {
                let precision = c.tp as f64 / (c.tp + c.fp) as f64;
                ap += gained as f64 / self.positives as f64 * precision;
            }
            prev_tp = c.tp;
        }
        Some(ap)
    }

    fn point(&self, p: &CurvePoint) -> OperatingPoint {
        let config_value = short_decimal(p.next_lower, p.threshold);
        OperatingPoint {
            threshold: p.threshold,
            config_value,
            rates: Rates::from(self.confusion_at(config_value)),
        }
    }

    /// Thresholds worth choosing: every finite distinct score (an infinite one is not a setting).
    fn candidates(&self) -> impl Iterator<Item = CurvePoint> {
        self.curve().into_iter().filter(|p| p.threshold.is_finite())
    }

    /// Pick the candidate with the largest `key` among those `admit` lets through. Candidates
    /// come highest threshold first and only a strictly larger key replaces the current pick, so
    /// ties go to the higher threshold: the same quality with fewer false alarms to risk.
    fn pick(
        &self,
        admit: impl Fn(&Confusion) -> bool,
        key: impl Fn(&Confusion) -> Option<f64>,
    ) -> Option<OperatingPoint> {
        let mut best: Option<(f64, CurvePoint)> = None;
        for p in self.candidates() {
            if !admit(&p.confusion) {
                continue;
            }
            let Some(k) = key(&p.confusion) else {
                continue;
            };
            if best.as_ref().is_none_or(|(b, _)| k > *b) {
                best = Some((k, p));
            }
        }
        best.map(|(_, p)| self.point(&p))
    }

    /// The threshold with the highest F1. Undefined without positives.
    pub fn best_f1(&self) -> Option<OperatingPoint> {
        self.pick(|_| true, Confusion::f1)
    }

    /// The threshold with the most recall whose precision is at least `target`. `None` when no
    /// threshold reaches it (or there are no positives).
    pub fn at_precision(&self, target: f64) -> Option<OperatingPoint> {
        self.pick(
            |c| c.precision().is_some_and(|p| p >= target - 1e-12),
            Confusion::recall,
        )
    }

    /// The threshold with the most recall whose false-positive rate is at most `target`. `None`
    /// without negatives or positives.
    pub fn at_fpr(&self, target: f64) -> Option<OperatingPoint> {
        self.pick(
            |c| c.fpr().is_some_and(|f| f <= target + 1e-12),
            Confusion::recall,
        )
    }
}

/// The shortest decimal `v` with `lower < v <= upper` (2 to 6 decimals), nearest the middle of
/// the gap; `upper` itself when no such decimal exists. Thresholds end up as `f32` in the config,
/// so `v` must also lie in the gap after a round trip through `f32`.
pub fn short_decimal(lower: f64, upper: f64) -> f64 {
    if !upper.is_finite() {
        return upper;
    }
    let fits = |v: f64| {
        let v32 = f64::from(v as f32);
        lower < v && v <= upper && lower < v32 && v32 <= upper
    };
    for decimals in 2..=6 {
        let scale = 10f64.powi(decimals);
        let hi = (upper * scale + 1e-9).floor();
        let lo = if lower.is_finite() {
            (lower * scale).floor() + 1.0
        } else {
            hi
        };
        if lo > hi {
            continue;
        }
        let mid = if lower.is_finite() {
            ((lower + upper) / 2.0 * scale).round().clamp(lo, hi)
        } else {
            hi
        };
        for k in [mid, mid + 1.0, mid - 1.0, hi, lo] {
            let v = k / scale;
            if k >= lo && k <= hi && fits(v) {
                return v;
            }
        }
    }
    upper
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(items: &[(f64, u8)]) -> Ranked {
        Ranked::new(items.iter().map(|&(s, l)| (s, l == 1)))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn confusion_rule_is_score_at_least_threshold() {
        let r = ranked(&[(0.9, 1), (0.8, 0), (0.8, 1), (0.3, 0)]);
        let c = r.confusion_at(0.8);
        assert_eq!(
            c,
            Confusion {
                tp: 2,
                fp: 1,
                tn: 1,
                fn_: 0
            }
        );
        assert!(close(c.precision().unwrap(), 2.0 / 3.0));
        assert!(close(c.recall().unwrap(), 1.0));
        assert!(close(c.f1().unwrap(), 0.8)); // 2·2 / (2·2 + 1 + 0)
        assert!(close(c.fpr().unwrap(), 0.5));
        let none = r.confusion_at(0.95);
        assert_eq!(none.precision(), None);
        assert_eq!(none.f1(), Some(0.0));
    }

    #[test]
    fn auc_counts_ties_as_half() {
        // Positives 0.9, 0.5; negatives 0.5, 0.1. Pairs: (0.9>0.5) 1, (0.9>0.1) 1, (0.5=0.5) ½,
        // (0.5>0.1) 1 → 3.5 / 4.
        let r = ranked(&[(0.9, 1), (0.5, 1), (0.5, 0), (0.1, 0)]);
        assert!(close(r.roc_auc().unwrap(), 0.875));
        // Every score tied: no information, AUC ½.
        let r = ranked(&[(0.4, 1), (0.4, 0), (0.4, 0)]);
        assert!(close(r.roc_auc().unwrap(), 0.5));
        // Perfectly inverted.
        let r = ranked(&[(0.1, 1), (0.9, 0)]);
        assert!(close(r.roc_auc().unwrap(), 0.0));
    }

    #[test]
    fn auc_matches_brute_force_mann_whitney() {
        let items = [
            (0.3, 1),
            (0.3, 0),
            (0.7, 1),
            (0.1, 0),
            (0.7, 0),
            (0.7, 1),
            (0.2, 1),
            (0.9, 0),
        ];
        let mut u = 0.0;
        let (mut p, mut n) = (0.0, 0.0);
        for &(s1, l1) in &items {
            if l1 == 1 {
                p += 1.0;
            } else {
                n += 1.0;
            }
            for &(s0, l0) in &items {
                if l1 == 1 && l0 == 0 {
                    u += if s1 > s0 {
                        1.0
                    } else if s1 == s0 {
                        0.5
                    } else {
                        0.0
                    };
                }
            }
        }
        assert!(close(ranked(&items).roc_auc().unwrap(), u / (p * n)));
    }

    #[test]
    fn average_precision_groups_ties() {
        // Distinct scores: P@1 = 1 (R ⅓), then 0.8 adds one positive and one negative together
        // (P 2/3, R ⅔), then 0.2 the last positive (P 3/5, R 1): AP = ⅓·1 + ⅓·⅔ + ⅓·⅗.
        let r = ranked(&[(0.9, 1), (0.8, 1), (0.8, 0), (0.5, 0), (0.2, 1)]);
        let want = (1.0 + 2.0 / 3.0 + 3.0 / 5.0) / 3.0;
        assert!(close(r.average_precision().unwrap(), want));
        // A perfect ranking has AP 1 whatever the class balance.
        let r = ranked(&[(0.9, 1), (0.8, 1), (0.1, 0), (0.0, 0), (-0.2, 0)]);
        assert!(close(r.average_precision().unwrap(), 1.0));
    }

    #[test]
    fn one_class_only_is_undefined_not_nan() {
        let only_pos = ranked(&[(0.9, 1), (0.4, 1)]);
        assert_eq!(only_pos.roc_auc(), None);
        assert!(close(only_pos.average_precision().unwrap(), 1.0));
        assert_eq!(only_pos.at_fpr(0.01), None);
        let best = only_pos.best_f1().unwrap();
        assert_eq!(best.threshold, 0.4);
        assert_eq!(best.rates.fpr, None);

        let only_neg = ranked(&[(0.9, 0), (0.4, 0)]);
        assert_eq!(only_neg.roc_auc(), None);
        assert_eq!(only_neg.average_precision(), None);
        assert!(only_neg.best_f1().is_none());
        assert!(only_neg.at_precision(0.9).is_none());

        let empty = ranked(&[]);
        assert!(empty.is_empty());
        assert_eq!(empty.roc_auc(), None);
        assert_eq!(empty.average_precision(), None);
        assert!(empty.best_f1().is_none());
        // Nothing undefined serialises as NaN.
        let json = serde_json::to_string(&Rates::from(empty.confusion_at(0.5))).unwrap();
        assert!(!json.contains("NaN") && json.contains("null"), "{json}");
    }

    #[test]
    fn best_f1_and_ties_prefer_the_higher_threshold() {
        // Threshold 0.8: tp 2, fp 0, fn 1 → F1 0.8. Threshold 0.6: tp 3, fp 1 → 6/7 ≈ 0.857.
        // Threshold 0.4: tp 3, fp 2 → 0.75.
        let r = ranked(&[(0.9, 1), (0.8, 1), (0.6, 1), (0.6, 0), (0.4, 0)]);
        let best = r.best_f1().unwrap();
        assert_eq!(best.threshold, 0.6);
        assert!(close(best.rates.f1.unwrap(), 6.0 / 7.0));
        // The config value lies in (0.4, 0.6] and makes the same predictions.
        assert!(best.config_value > 0.4 && best.config_value <= 0.6);
        assert_eq!(best.config_value, 0.5);
        assert_eq!(best.rates.confusion, r.confusion_at(0.6));

        // A tie: at 0.7, tp 2, fp 0, fn 2 → 4/6; at 0.3, tp 4, fp 4, fn 0 → 8/12. The higher wins.
        let r = ranked(&[
            (0.9, 1),
            (0.7, 1),
            (0.5, 0),
            (0.5, 0),
            (0.3, 1),
            (0.3, 1),
            (0.3, 0),
            (0.3, 0),
        ]);
        let best = r.best_f1().unwrap();
        assert!(close(best.rates.f1.unwrap(), 2.0 / 3.0));
        assert_eq!(best.threshold, 0.7);
    }

    #[test]
    fn target_precision_and_target_fpr() {
        let r = ranked(&[
            (0.95, 1),
            (0.9, 1),
            (0.85, 0),
            (0.8, 1),
            (0.7, 1),
            (0.6, 0),
            (0.5, 0),
            (0.4, 1),
            (0.3, 0),
        ]);
        // Precision by threshold: 0.95 → 1, 0.9 → 1, 0.85 → ⅔, 0.8 → ¾, 0.7 → ⅘, 0.6 → ⅔ ...
        let p = r.at_precision(0.75).unwrap();
        assert_eq!(p.threshold, 0.7); // recall 4/5: the most recall at precision ≥ ¾
        assert!(close(p.rates.recall.unwrap(), 0.8));
        let p = r.at_precision(1.0).unwrap();
        assert_eq!(p.threshold, 0.9);
        assert!(r.at_precision(1.01).is_none());
        // FPR ≤ 0.25 (4 negatives → at most one false alarm): the lowest such cut is 0.7.
        let f = r.at_fpr(0.25).unwrap();
        assert_eq!(f.threshold, 0.7);
        assert_eq!(f.rates.confusion.fp, 1);
        // FPR 0: stop above the first negative.
        assert_eq!(r.at_fpr(0.0).unwrap().threshold, 0.9);
    }

    #[test]
    fn ruled_out_items_rank_last_and_are_never_a_threshold() {
        let r = ranked(&[(0.9, 1), (f64::NEG_INFINITY, 1), (0.2, 0), (f64::NAN, 0)]);
        assert_eq!(r.len(), 4);
        // Positive 0.9 beats both negatives (0.2, -inf); the -inf positive ties with the -inf
        // negative (½) and loses to 0.2: (2 + 0.5) / 4.
        assert!(close(r.roc_auc().unwrap(), 0.625));
        let best = r.best_f1().unwrap();
        assert!(best.threshold.is_finite());
        assert_eq!(best.threshold, 0.9);
        assert!(r.curve().last().unwrap().threshold.is_infinite());
    }

    #[test]
    fn short_decimals_stay_in_the_gap() {
        assert_eq!(short_decimal(0.851, 0.8634), 0.86);
        assert_eq!(short_decimal(0.80, 0.8634), 0.83);
        assert_eq!(short_decimal(0.8601, 0.8634), 0.862);
        assert_eq!(short_decimal(f64::NEG_INFINITY, 0.8634), 0.86);
        assert_eq!(short_decimal(0.5, 0.5 + 1e-9), 0.5 + 1e-9);
        let v = short_decimal(0.123_456_1, 0.123_456_9);
        assert!(v > 0.123_456_1 && v <= 0.123_456_9);
    }
}
