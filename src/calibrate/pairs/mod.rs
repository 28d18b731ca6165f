//! `calibrate pairs`: labelled text pairs in, per-kind metrics of the embedding and of the
//! lexical baselines out, with the threshold loopguard should use for each kind.
//!
//! Input, one pair per line: `{"a": "...", "b": "...", "label": 0|1, "kind": "failure"}` (other
//! fields are ignored; `kind` is optional when the file is given a kind). Label 1 means "b is a
//! rewording of a": what loopguard should call the same failure, request or response.
//!
//! Every text is prepared exactly as the engine prepares it (normalised, head and tail kept past
//! `model.max_text_chars`) and embedded once. Five scorers are compared:
//!
//! - `loopguard`: what the engine's matcher decides (`matching::rule_score`, the same function
//!   the engine uses): equal after normalisation is a match whatever the threshold; for failures,
//!   a message contained in the other is too; tool calls naming other resources and texts whose
//!   numbers differ never match; otherwise the cosine. *The thresholds
//!   loopguard should ship are chosen on this scorer*, because it is the rule they are used in.
//! - `cosine`: the embedding cosine alone.
//! - `exact`: equal after normalisation (what exact-signature detectors do).
//! - `jaccard`: word Jaccard of the normalised texts (the word-overlap detectors' rule, threshold 0.8).
//! - `levenshtein`: normalised Levenshtein similarity of the normalised texts (the same
//!   detectors' alternative).

mod render;
mod score;
pub use render::{config_snippet, write_outputs};
use score::{score_pair, Side};
pub use score::{word_jaccard, Scorer};

use super::metrics::{OperatingPoint, Ranked, Rates};
use super::plot::{self, Chart, Corner, Dash, PALETTE};
use super::report::{self, num, SnippetEntry, Table, Written};
use super::{display_name, read_lines, CalibrateError, PairKind};
use crate::config::Config;
use crate::detect::matching;
use crate::embed::{cosine, Embedder, Vector};
use crate::engine::observe::compared_text;
use crate::event::InputError;
use crate::signature::normalize;
use crate::state::TextSig;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// One labelled pair.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledPair {
    pub a: String,
    pub b: String,
    /// True: b is a rewording of a.
    pub label: bool,
    pub kind: Option<PairKind>,
    /// Index into the inputs (which file it came from).
    pub input: usize,
}

#[derive(Deserialize)]
struct RawPair {
    a: String,
    b: String,
    label: serde_json::Value,
    #[serde(default)]
    kind: Option<String>,
}

/// Parse one line: `{"a", "b", "label": 0|1, "kind"?}`. Errors name the JSON path at fault.
pub fn parse_pair(line: &str) -> Result<(String, String, bool, Option<PairKind>), InputError> {
    let mut de = serde_json::Deserializer::from_str(line);
    let raw: RawPair = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        InputError::new(path, e.into_inner().to_string())
    })?;
    de.end()
        .map_err(|e| InputError::new(".", format!("trailing characters after the pair: {e}")))?;
    let label = match &raw.label {
        serde_json::Value::Number(n) if n.as_u64() == Some(0) => false,
        serde_json::Value::Number(n) if n.as_u64() == Some(1) => true,
        serde_json::Value::Bool(b) => *b,
        other => {
            return Err(InputError::new(
                "label",
                format!("must be 0 or 1, got {other}"),
            ))
        }
    };
    let kind = match raw.kind.as_deref() {
        None => None,
        Some(k) => Some(PairKind::parse(k).ok_or_else(|| {
            InputError::new(
                "kind",
                format!("unknown kind `{k}`; expected one of {}", PairKind::names()),
            )
        })?),
    };
    Ok((raw.a, raw.b, label, kind))
}

/// Read a pairs file. `kind` applies to lines without their own `kind`.
pub fn read_pairs(
    path: &Path,
    kind: Option<PairKind>,
    input: usize,
) -> Result<Vec<LabelledPair>, CalibrateError> {
    let file = display_name(path);
    let lines = read_lines(path)?;
    if lines.is_empty() {
        return Err(CalibrateError::Empty {
            file,
            what: "pairs",
        });
    }
    lines
        .into_iter()
        .map(|(line, text)| {
            let (a, b, label, own_kind) =
                parse_pair(&text).map_err(|error| CalibrateError::Input {
                    file: file.clone(),
                    line,
                    error,
                })?;
            Ok(LabelledPair {
                a,
                b,
                label,
                kind: own_kind.or(kind),
                input,
            })
        })
        .collect()
}

/// Which operating point becomes the recommended threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The highest F1: a false alarm costs as much as a missed loop.
    BestF1,
    /// The most recall at precision ≥ the target.
    TargetPrecision,
    /// The most recall at false-positive rate ≤ the target.
    TargetFpr,
}

impl Rule {
    /// A few words for chart legends.
    pub fn label(self) -> &'static str {
        match self {
            Rule::BestF1 => "best-F1",
            Rule::TargetPrecision => "target-precision",
            Rule::TargetFpr => "target-FPR",
        }
    }

    pub fn describe(self, opts: &PairsOptions) -> String {
        match self {
            Rule::BestF1 => "the highest F1 (a false alarm costs as much as a miss)".into(),
            Rule::TargetPrecision => {
                format!("the most recall at precision ≥ {}", opts.target_precision)
            }
            Rule::TargetFpr => format!(
                "the most recall at false-positive rate ≤ {}",
                opts.target_fpr
            ),
        }
    }
}

/// How `calibrate pairs` runs.
#[derive(Debug, Clone)]
pub struct PairsOptions {
    pub target_precision: f64,
    pub target_fpr: f64,
    pub rule: Rule,
    /// Texts per embedding call (the progress callback runs after each).
    pub batch: usize,
}

impl Default for PairsOptions {
    fn default() -> Self {
        PairsOptions {
            target_precision: 0.95,
            target_fpr: 0.01,
            rule: Rule::BestF1,
            batch: 256,
        }
    }
}

/// A labelled pairs file.
#[derive(Debug, Clone, Serialize)]
pub struct PairsInput {
    pub file: String,
    /// The kind given to the file's lines that name none.
    pub kind: Option<PairKind>,
    pub pairs: usize,
    pub positives: usize,
}

/// A fixed threshold worth seeing next to the chosen ones (another detector's, the current config's).
#[derive(Debug, Clone, Serialize)]
pub struct FixedPoint {
    pub name: String,
    pub threshold: f64,
    #[serde(flatten)]
    pub rates: Rates,
}

#[derive(Debug, Clone, Serialize)]
pub struct GridRow {
    pub threshold: f64,
    #[serde(flatten)]
    pub rates: Rates,
}

/// One scorer on one group of pairs.
#[derive(Debug, Clone, Serialize)]
pub struct ScorerReport {
    pub scorer: Scorer,
    pub description: &'static str,
    pub roc_auc: Option<f64>,
    /// Average precision.
    pub pr_auc: Option<f64>,
    pub best_f1: Option<OperatingPoint>,
    /// The most recall at precision ≥ the target precision.
    pub at_target_precision: Option<OperatingPoint>,
    /// The most recall at false-positive rate ≤ the target.
    pub at_target_fpr: Option<OperatingPoint>,
    pub fixed: Vec<FixedPoint>,
    /// Precision, recall, F1 and FPR at thresholds 0, 0.05, ..., 1.
    pub grid: Vec<GridRow>,
    #[serde(skip)]
    pub ranked: Ranked,
}

/// Pairs the matcher decides without the model.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct KeyDecisions {
    /// Equal after normalisation (or, for failures, one message inside the other): always a match.
    pub matched_positives: usize,
    pub matched_negatives: usize,
    /// Numbers differ: never a match, whatever the cosine.
    pub ruled_out_positives: usize,
    pub ruled_out_negatives: usize,
}

/// The threshold this report recommends for a kind.
#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    pub key: String,
    pub value: f64,
    /// The configuration's threshold for the kind (none for pairs without a kind).
    pub current: Option<f64>,
    pub rule: Rule,
    pub scorer: Scorer,
    #[serde(flatten)]
    pub rates: Rates,
}

/// One group of pairs: a kind, the pairs without a kind, or all of them.
#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    pub group: String,
    pub kind: Option<PairKind>,
    pub files: Vec<String>,
    pub pairs: usize,
    pub positives: usize,
    pub negatives: usize,
    pub notes: Vec<String>,
    pub decided_by_keys: KeyDecisions,
    pub scorers: Vec<ScorerReport>,
    pub recommended: Option<Recommendation>,
}

impl GroupReport {
    pub fn scorer(&self, s: Scorer) -> Option<&ScorerReport> {
        self.scorers.iter().find(|r| r.scorer == s)
    }
}

/// What embedding the pairs cost.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct EmbeddingWork {
    /// Distinct prepared texts.
    pub texts: usize,
    /// Texts the model embedded now.
    pub embedded: u64,
    /// Texts the embedding cache on disk answered with the vector an earlier command's model
    /// gave them (the rest of `texts` came from the in-memory cache).
    pub from_disk: u64,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PairsReport {
    pub command: &'static str,
    pub loopguard_version: &'static str,
    pub model: String,
    pub inputs: Vec<PairsInput>,
    pub target_precision: f64,
    pub target_fpr: f64,
    pub rule: Rule,
    pub rule_description: String,
    pub embedding: EmbeddingWork,
    pub groups: Vec<GroupReport>,
    /// Kind → recommended threshold.
    pub recommended: BTreeMap<String, f64>,
}

/// Embed, score and measure. `inputs[i]` describes the file `pairs[..].input == i` came from;
/// `progress(done, total)` runs after each embedding call. Call from outside an async runtime.
pub fn calibrate_pairs(
    cfg: &Config,
    embedder: &Embedder,
    inputs: Vec<PairsInput>,
    pairs: &[LabelledPair],
    opts: &PairsOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<PairsReport, CalibrateError> {
    if pairs.is_empty() {
        return Err(CalibrateError::Invalid(
            "no labelled pairs to calibrate on".into(),
        ));
    }
    let max_chars = cfg.model.max_text_chars;
    let sides: Vec<(Side, Side)> = pairs
        .iter()
        .map(|p| {
            (
                Side::of(p.kind, &p.a, max_chars),
                Side::of(p.kind, &p.b, max_chars),
            )
        })
        .collect();

    // Each distinct prepared text once, in first-seen order.
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut texts: Vec<String> = Vec::new();
    for (a, b) in &sides {
        for s in [a, b] {
            index.entry(s.sig.text.as_str()).or_insert_with(|| {
                texts.push(s.sig.text.clone());
                texts.len() - 1
            });
        }
    }
    let started = Instant::now();
    let stats = embedder.stats();
    let (embedded_before, disk_before) = (
        stats.texts_embedded.load(Relaxed),
        stats.disk_hits.load(Relaxed),
    );
    let mut vectors: Vec<Vector> = Vec::with_capacity(texts.len());
    progress(0, texts.len());
    for chunk in texts.chunks(opts.batch.max(1)) {
        vectors.extend(embedder.embed_blocking(chunk)?);
        progress(vectors.len(), texts.len());
    }
    let embedding = EmbeddingWork {
        texts: texts.len(),
        embedded: stats.texts_embedded.load(Relaxed) - embedded_before,
        from_disk: stats.disk_hits.load(Relaxed) - disk_before,
        seconds: started.elapsed().as_secs_f64(),
    };

    let scores: Vec<[f64; 5]> = pairs
        .iter()
        .zip(&sides)
        .map(|(p, (a, b))| {
            let va = &vectors[index[a.sig.text.as_str()]];
            let vb = &vectors[index[b.sig.text.as_str()]];
            score_pair(p.kind, a, b, f64::from(cosine(va, vb)))
        })
        .collect();

    // Groups: each kind present, the pairs without one, and all together when there is more
    // than one group.
    let mut by_group: BTreeMap<Option<PairKind>, Vec<usize>> = BTreeMap::new();
    for (i, p) in pairs.iter().enumerate() {
        by_group.entry(p.kind).or_default().push(i);
    }
    let mut groups: Vec<(String, Option<PairKind>, Vec<usize>)> = Vec::new();
    let several = by_group.len() > 1;
    for (kind, members) in &by_group {
        let name = match kind {
            Some(k) => k.as_str().to_string(),
            None if several => "unspecified".to_string(),
            None => "all".to_string(),
        };
        groups.push((name, *kind, members.clone()));
    }
    // Kinds first in their fixed order, the unkinded after them.
    groups.sort_by_key(|(_, k, _)| (k.is_none(), *k));
    if several {
        groups.push(("all".to_string(), None, (0..pairs.len()).collect()));
    }

    let group_reports: Vec<GroupReport> = groups
        .into_iter()
        .map(|(name, kind, members)| {
            group_report(cfg, &inputs, pairs, &scores, name, kind, &members, opts)
        })
        .collect();
    let recommended = group_reports
        .iter()
        .filter_map(|g| Some((g.kind?.as_str().to_string(), g.recommended.as_ref()?.value)))
        .collect();
    Ok(PairsReport {
        command: "pairs",
        loopguard_version: env!("CARGO_PKG_VERSION"),
        model: embedder.describe(),
        inputs,
        target_precision: opts.target_precision,
        target_fpr: opts.target_fpr,
        rule: opts.rule,
        rule_description: opts.rule.describe(opts),
        embedding,
        groups: group_reports,
        recommended,
    })
}

#[allow(clippy::too_many_arguments)]
fn group_report(
    cfg: &Config,
    inputs: &[PairsInput],
    pairs: &[LabelledPair],
    scores: &[[f64; 5]],
    group: String,
    kind: Option<PairKind>,
    members: &[usize],
    opts: &PairsOptions,
) -> GroupReport {
    let positives = members.iter().filter(|&&i| pairs[i].label).count();
    let negatives = members.len() - positives;
    let mut files: Vec<String> = Vec::new();
    for &i in members {
        let f = &inputs[pairs[i].input].file;
        if !files.contains(f) {
            files.push(f.clone());
        }
    }
    let mut notes = Vec::new();
    if positives == 0 {
        notes.push(
            "only negative pairs: ROC-AUC, PR-AUC, recall and F1 are undefined, no threshold is chosen"
                .to_string(),
        );
    } else if negatives == 0 {
        notes.push(
            "only positive pairs: ROC-AUC and false-positive rates are undefined; a threshold chosen without negatives will over-match"
                .to_string(),
        );
    }

    let mut keys = KeyDecisions::default();
    for &i in members {
        let s = scores[i][0];
        match (s == f64::INFINITY, s == f64::NEG_INFINITY, pairs[i].label) {
            (true, _, true) => keys.matched_positives += 1,
            (true, _, false) => keys.matched_negatives += 1,
            (_, true, true) => keys.ruled_out_positives += 1,
            (_, true, false) => keys.ruled_out_negatives += 1,
            _ => {}
        }
    }
    if keys.ruled_out_positives > 0 {
        notes.push(format!(
            "{} of {positives} positive pairs can never match in loopguard: their numbers differ (the numbers guard that keeps paging and polling quiet)",
            keys.ruled_out_positives
        ));
    }

    // The config holds f32: shown as its shortest decimal (0.86, not 0.8600000143).
    let current = kind.map(|k| {
        let t = k.threshold(cfg);
        t.to_string().parse::<f64>().unwrap_or(f64::from(t))
    });
    let scorers: Vec<ScorerReport> = Scorer::ALL
        .iter()
        .enumerate()
        .map(|(si, &scorer)| {
            let ranked = Ranked::new(members.iter().map(|&i| (scores[i][si], pairs[i].label)));
            let mut fixed = Vec::new();
            let mut fix = |name: String, t: f64| {
                fixed.push(FixedPoint {
                    name,
                    threshold: t,
                    rates: Rates::from(ranked.confusion_at(t)),
                })
            };
            match scorer {
                Scorer::Loopguard => {
                    if let Some(c) = current {
                        fix(format!("current config ({})", report::threshold(c)), c);
                    }
                }
                Scorer::Cosine => fix("seed 000 (0.85)".into(), 0.85),
                Scorer::Exact => fix("equal after normalisation".into(), 1.0),
                Scorer::Jaccard => fix("seed 004 (0.8)".into(), 0.8),
                Scorer::Levenshtein => fix("seed 004 (0.8)".into(), 0.8),
            }
            let grid = (0..=20)
                .map(|i| {
                    let t = i as f64 / 20.0;
                    GridRow {
                        threshold: t,
                        rates: Rates::from(ranked.confusion_at(t)),
                    }
                })
                .collect();
            ScorerReport {
                scorer,
                description: scorer.description(),
                roc_auc: ranked.roc_auc(),
                pr_auc: ranked.average_precision(),
                best_f1: ranked.best_f1(),
                at_target_precision: ranked.at_precision(opts.target_precision),
                at_target_fpr: ranked.at_fpr(opts.target_fpr),
                fixed,
                grid,
                ranked,
            }
        })
        .collect();

    let lg = &scorers[0];
    let chosen = match opts.rule {
        Rule::BestF1 => lg.best_f1,
        Rule::TargetPrecision => lg.at_target_precision,
        Rule::TargetFpr => lg.at_target_fpr,
    };
    if chosen.is_none() && positives > 0 {
        notes.push(format!(
            "no threshold of the loopguard scorer meets the rule ({}): nothing is recommended",
            opts.rule.describe(opts)
        ));
    }
    let recommended = chosen.map(|p| Recommendation {
        key: kind
            .map(PairKind::config_key)
            .unwrap_or_else(|| "detect.similarity.<kind>".into()),
        value: p.config_value,
        current,
        rule: opts.rule,
        scorer: Scorer::Loopguard,
        rates: p.rates,
    });
    GroupReport {
        group,
        kind,
        files,
        pairs: members.len(),
        positives,
        negatives,
        notes,
        decided_by_keys: keys,
        scorers,
        recommended,
    }
}

#[cfg(test)]
mod tests;
