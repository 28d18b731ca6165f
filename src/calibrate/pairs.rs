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
//! - `loopguard`: what the engine's matcher decides (src/detect/matching.rs): equal after
//!   normalisation is a match whatever the threshold; for failures, a message contained in the
//!   other is too; texts whose numbers differ never match; otherwise the cosine. *The thresholds
//!   loopguard should ship are chosen on this scorer*, because it is the rule they are used in.
//! - `cosine`: the embedding cosine alone.
//! - `exact`: equal after normalisation (what exact-signature detectors do).
//! - `jaccard`: word Jaccard of the normalised texts (seed 004, threshold 0.8).
//! - `levenshtein`: normalised Levenshtein similarity of the normalised texts (seed 004's
//!   alternative).

use super::metrics::{OperatingPoint, Ranked, Rates};
use super::plot::{self, Chart, Corner, Dash, PALETTE};
use super::report::{self, num, SnippetEntry, Table, Written};
use super::{display_name, read_lines, CalibrateError, PairKind};
use crate::config::Config;
use crate::embed::{cosine, Embedder, Vector};
use crate::event::InputError;
use crate::signature::{head_tail, normalize, numbers};
use crate::state::MAX_NUMBERS;
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

/// A way of scoring how alike two texts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scorer {
    Loopguard,
    Cosine,
    Exact,
    Jaccard,
    Levenshtein,
}

impl Scorer {
    pub const ALL: [Scorer; 5] = [
        Scorer::Loopguard,
        Scorer::Cosine,
        Scorer::Exact,
        Scorer::Jaccard,
        Scorer::Levenshtein,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scorer::Loopguard => "loopguard",
            Scorer::Cosine => "cosine",
            Scorer::Exact => "exact",
            Scorer::Jaccard => "jaccard",
            Scorer::Levenshtein => "levenshtein",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Scorer::Loopguard => "loopguard's matcher: keys, numbers guard, then embedding cosine",
            Scorer::Cosine => "embedding cosine alone (all-MiniLM-L6-v2)",
            Scorer::Exact => "exact match after normalisation",
            Scorer::Jaccard => "word Jaccard of the normalised texts",
            Scorer::Levenshtein => "normalised Levenshtein similarity of the normalised texts",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Scorer::Loopguard => PALETTE[0],
            Scorer::Cosine => PALETTE[5],
            Scorer::Exact => PALETTE[7],
            Scorer::Jaccard => PALETTE[1],
            Scorer::Levenshtein => PALETTE[2],
        }
    }

    fn dash(self) -> Dash {
        match self {
            Scorer::Loopguard => Dash::Solid,
            Scorer::Cosine => Dash::DashDot,
            Scorer::Exact => Dash::Dotted,
            Scorer::Jaccard | Scorer::Levenshtein => Dash::Dashed,
        }
    }
}

/// Words of a normalised text: runs of letters, digits and underscores.
fn words(text: &str) -> std::collections::HashSet<&str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Word Jaccard: shared words over all words; two texts without words are alike (1).
pub fn word_jaccard(a: &str, b: &str) -> f64 {
    let (wa, wb) = (words(a), words(b));
    let union = wa.union(&wb).count();
    if union == 0 {
        return 1.0;
    }
    wa.intersection(&wb).count() as f64 / union as f64
}

/// Shortest message that counts when found inside a longer one (as in src/detect/matching.rs).
const MIN_CONTAINED_CHARS: usize = 24;

/// One side of a pair, prepared the way the engine prepares a text.
struct Side {
    raw_equal_key: String,
    normalized: String,
    prepared: String,
    numbers: Vec<String>,
}

impl Side {
    fn of(text: &str, max_chars: usize) -> Side {
        let normalized = normalize(text);
        let mut nums = numbers(&normalized);
        nums.truncate(MAX_NUMBERS);
        Side {
            raw_equal_key: text.to_string(),
            prepared: head_tail(&normalized, max_chars),
            normalized,
            numbers: nums,
        }
    }
}

/// The scores of one pair, in [`Scorer::ALL`] order.
fn score_pair(kind: Option<PairKind>, a: &Side, b: &Side, cos: f64) -> [f64; 5] {
    let equal = a.raw_equal_key == b.raw_equal_key || a.normalized == b.normalized;
    let contained = kind == Some(PairKind::Failure) && {
        let (short, long) = if a.prepared.len() <= b.prepared.len() {
            (&a.prepared, &b.prepared)
        } else {
            (&b.prepared, &a.prepared)
        };
        short.len() >= MIN_CONTAINED_CHARS && long.contains(short.as_str())
    };
    let loopguard = if equal || contained {
        f64::INFINITY
    } else if a.numbers != b.numbers {
        f64::NEG_INFINITY
    } else {
        cos
    };
    [
        loopguard,
        cos,
        if a.normalized == b.normalized {
            1.0
        } else {
            0.0
        },
        word_jaccard(&a.normalized, &b.normalized),
        strsim::normalized_levenshtein(&a.normalized, &b.normalized),
    ]
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

/// A fixed threshold worth seeing next to the chosen ones (a seed's, the current config's).
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
    /// Texts the model embedded (the rest came from the cache).
    pub embedded: u64,
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
        .map(|p| (Side::of(&p.a, max_chars), Side::of(&p.b, max_chars)))
        .collect();

    // Each distinct prepared text once, in first-seen order.
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut texts: Vec<String> = Vec::new();
    for (a, b) in &sides {
        for s in [a, b] {
            index.entry(s.prepared.as_str()).or_insert_with(|| {
                texts.push(s.prepared.clone());
                texts.len() - 1
            });
        }
    }
    let started = Instant::now();
    let embedded_before = embedder.stats().texts_embedded.load(Relaxed);
    let mut vectors: Vec<Vector> = Vec::with_capacity(texts.len());
    progress(0, texts.len());
    for chunk in texts.chunks(opts.batch.max(1)) {
        vectors.extend(embedder.embed_blocking(chunk)?);
        progress(vectors.len(), texts.len());
    }
    let embedding = EmbeddingWork {
        texts: texts.len(),
        embedded: embedder.stats().texts_embedded.load(Relaxed) - embedded_before,
        seconds: started.elapsed().as_secs_f64(),
    };

    let scores: Vec<[f64; 5]> = pairs
        .iter()
        .zip(&sides)
        .map(|(p, (a, b))| {
            let va = &vectors[index[a.prepared.as_str()]];
            let vb = &vectors[index[b.prepared.as_str()]];
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

/// Write `report.json`, `REPORT.md`, `recommended.toml` and the charts into `dir`.
pub fn write_outputs(report: &PairsReport, dir: &Path) -> Result<Written, CalibrateError> {
    let mut w = Written::create(dir)?;
    w.json(dir, "report.json", report)?;
    let mut charts: Vec<(String, Vec<String>)> = Vec::new();
    for g in &report.groups {
        let names = charts_for(g, report.rule.label());
        let mut files = Vec::new();
        for (suffix, chart) in names {
            let name = format!("pairs-{}-{suffix}.svg", g.group);
            w.text(dir, &name, &chart.to_svg())?;
            files.push(name);
        }
        charts.push((g.group.clone(), files));
    }
    w.text(dir, "REPORT.md", &markdown(report, &charts))?;
    w.text(dir, "recommended.toml", &config_snippet(report))?;
    Ok(w)
}

/// `rule`: how the marked threshold was chosen, for the legends.
fn charts_for(g: &GroupReport, rule: &str) -> Vec<(&'static str, Chart)> {
    let title = |what: &str| format!("{what} — {} ({} pairs)", g.group, g.pairs);
    let mut out = Vec::new();
    let has_both = g.positives > 0 && g.negatives > 0;
    let chosen = g.recommended.as_ref().map(|r| r.value);

    if has_both {
        let mut roc = Chart::new(
            title("ROC"),
            "false-positive rate",
            "true-positive rate (recall)",
            (0.0, 1.0),
            (0.0, 1.0),
        );
        roc.line(None, "#999999", Dash::Dotted, &[(0.0, 0.0), (1.0, 1.0)]);
        for s in &g.scorers {
            let mut pts = vec![(0.0, 0.0)];
            pts.extend(
                s.ranked
                    .curve()
                    .iter()
                    .filter_map(|p| Some((p.confusion.fpr()?, p.confusion.recall()?))),
            );
            let name = format!("{} (AUC {})", s.scorer.as_str(), num(s.roc_auc, 3));
            roc.line(Some(&name), s.scorer.color(), s.scorer.dash(), &pts);
        }
        if let Some(r) = &g.recommended {
            if let (Some(x), Some(y)) = (r.rates.fpr, r.rates.recall) {
                roc.points(Some(&format!("{rule} threshold")), PALETTE[3], &[(x, y)]);
            }
        }
        out.push(("roc", roc.legend(Corner::BottomRight)));
    }

    if g.positives > 0 {
        let prevalence = g.positives as f64 / g.pairs as f64;
        let mut pr = Chart::new(
            title("Precision–recall"),
            "recall",
            "precision",
            (0.0, 1.0),
            (0.0, 1.0),
        );
        pr.line(
            Some("chance (share of positives)"),
            "#999999",
            Dash::Dotted,
            &[(0.0, prevalence), (1.0, prevalence)],
        );
        for s in &g.scorers {
            let mut pts: Vec<(f64, f64)> = Vec::new();
            for p in s.ranked.curve() {
                let (Some(r), Some(pr)) = (p.confusion.recall(), p.confusion.precision()) else {
                    continue;
                };
                // Step-wise, as average precision integrates it.
                if let Some(&(_, last_p)) = pts.last() {
                    pts.push((r, last_p));
                } else {
                    pts.push((0.0, pr));
                }
                pts.push((r, pr));
            }
            let name = format!("{} (AP {})", s.scorer.as_str(), num(s.pr_auc, 3));
            pr.line(Some(&name), s.scorer.color(), s.scorer.dash(), &pts);
        }
        if let Some(r) = &g.recommended {
            if let (Some(x), Some(y)) = (r.rates.recall, r.rates.precision) {
                pr.points(Some(&format!("{rule} threshold")), PALETTE[3], &[(x, y)]);
            }
        }
        out.push(("pr", pr.legend(Corner::BottomLeft)));
    }

    if let Some(cos) = g.scorer(Scorer::Cosine) {
        let lo = cos
            .ranked
            .scores(true)
            .chain(cos.ranked.scores(false))
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::min);
        let lo = ((lo * 10.0).floor() / 10.0).min(0.5);
        let bins = ((1.0 - lo) * 50.0).round().max(1.0) as usize;
        let mut hist_max: f64 = 0.0;
        let mut series = Vec::new();
        for (positive, name, color) in [
            (false, "negatives (different)", PALETTE[1]),
            (true, "positives (reworded)", PALETTE[0]),
        ] {
            let n = if positive { g.positives } else { g.negatives };
            if n == 0 {
                continue;
            }
            let (edges, counts) = plot::histogram(cos.ranked.scores(positive), lo, 1.0, bins);
            let share: Vec<f64> = counts.iter().map(|c| c / n as f64).collect();
            hist_max = share.iter().copied().fold(hist_max, f64::max);
            series.push((format!("{name}, {n}"), color, edges, share));
        }
        let mut hist = Chart::new(
            title("Cosine by label"),
            "cosine of the prepared texts",
            "share of the label's pairs",
            (lo, 1.0),
            (0.0, (hist_max * 1.1).max(0.01)),
        );
        for (name, color, edges, share) in &series {
            hist.histogram(Some(name), color, edges, share);
        }
        hist.vline(Some("seed 000 (0.85)"), "#777777", Dash::Dotted, 0.85);
        if let Some(r) = &g.recommended {
            if let Some(c) = r.current {
                hist.vline(
                    Some(&format!("current ({})", report::threshold(c))),
                    PALETTE[4],
                    Dash::Dashed,
                    c,
                );
            }
            hist.vline(
                Some(&format!("{rule} ({})", report::threshold(r.value))),
                PALETTE[3],
                Dash::Solid,
                r.value,
            );
        }
        out.push(("hist", hist.legend(Corner::TopLeft)));
    }

    if g.positives > 0 {
        let mut f1 = Chart::new(
            title("F1 by threshold"),
            "threshold (score ≥ threshold is a match)",
            "F1",
            (0.0, 1.0),
            (0.0, 1.0),
        );
        for s in g.scorers.iter().filter(|s| s.scorer != Scorer::Exact) {
            let pts: Vec<(f64, f64)> = s
                .ranked
                .curve()
                .iter()
                .rev()
                .filter(|p| p.threshold.is_finite() && p.threshold >= 0.0)
                .filter_map(|p| Some((p.threshold, p.confusion.f1()?)))
                .collect();
            let best = s.best_f1.and_then(|b| b.rates.f1);
            let name = format!("{} (best {})", s.scorer.as_str(), num(best, 3));
            f1.line(Some(&name), s.scorer.color(), s.scorer.dash(), &pts);
        }
        if let Some(v) = chosen {
            f1.vline(
                Some(&format!("{rule} ({})", report::threshold(v))),
                PALETTE[3],
                Dash::Solid,
                v,
            );
        }
        out.push(("f1", f1.legend(Corner::BottomLeft)));
    }
    out
}

fn op_cells(p: Option<&OperatingPoint>) -> [String; 2] {
    match p {
        Some(p) => [
            report::threshold(p.config_value),
            format!(
                "P {} R {}",
                num(p.rates.precision, 2),
                num(p.rates.recall, 2)
            ),
        ],
        None => ["–".into(), "–".into()],
    }
}

fn markdown(r: &PairsReport, charts: &[(String, Vec<String>)]) -> String {
    let mut s = String::new();
    s.push_str("# loopguard calibrate pairs\n\n");
    s.push_str(&format!(
        "Generated by `loopguard calibrate pairs` (loopguard {}), model: {}.\n\n",
        r.loopguard_version, r.model
    ));
    s.push_str("A pair is predicted *the same, reworded* when its score ≥ the threshold. ");
    s.push_str(
        "Thresholds are shown as the short decimal that makes the same predictions on this data; ",
    );
    s.push_str("precision (P), recall (R), F1 and false-positive rate (FPR) are measured at it. ");
    s.push_str(&format!(
        "The recommended threshold per kind is {} of the `loopguard` scorer — the rule the threshold is used in.\n\n",
        r.rule_description
    ));

    let mut inputs = Table::new(&["file", "kind", "pairs", "positives"]);
    for i in &r.inputs {
        inputs.row(vec![
            format!("`{}`", i.file),
            i.kind
                .map(|k| k.as_str().to_string())
                .unwrap_or_else(|| "per line".into()),
            i.pairs.to_string(),
            i.positives.to_string(),
        ]);
    }
    s.push_str(&inputs.render());
    s.push('\n');

    s.push_str("## Recommended thresholds\n\n");
    let mut rec = Table::new(&[
        "kind",
        "config key",
        "recommended",
        "current",
        "P",
        "R",
        "F1",
        "FPR",
    ]);
    for g in &r.groups {
        let Some(x) = &g.recommended else { continue };
        rec.row(vec![
            g.group.clone(),
            format!("`{}`", x.key),
            format!("**{}**", report::threshold(x.value)),
            x.current
                .map(report::threshold)
                .unwrap_or_else(|| "–".into()),
            num(x.rates.precision, 3),
            num(x.rates.recall, 3),
            num(x.rates.f1, 3),
            num(x.rates.fpr, 3),
        ]);
    }
    s.push_str(&rec.render());
    s.push_str("\nThe snippet is in [`recommended.toml`](recommended.toml).\n\n");

    for g in &r.groups {
        s.push_str(&format!("## {}\n\n", g.group));
        s.push_str(&format!(
            "{} pairs ({} positive, {} negative) from {}.\n\n",
            g.pairs,
            g.positives,
            g.negatives,
            g.files
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        for n in &g.notes {
            s.push_str(&format!("- {n}\n"));
        }
        if !g.notes.is_empty() {
            s.push('\n');
        }
        let p_head = format!("@ P ≥ {}", r.target_precision);
        let f_head = format!("@ FPR ≤ {}", r.target_fpr);
        let mut t = Table::new(&[
            "scorer",
            "ROC-AUC",
            "PR-AUC",
            "best-F1 threshold",
            "P",
            "R",
            "F1",
            &p_head,
            "",
            &f_head,
            "",
        ]);
        for sc in &g.scorers {
            let b = sc.best_f1.as_ref();
            let [pt, pr] = op_cells(sc.at_target_precision.as_ref());
            let [ft, fr] = op_cells(sc.at_target_fpr.as_ref());
            t.row(vec![
                format!("`{}`", sc.scorer.as_str()),
                num(sc.roc_auc, 3),
                num(sc.pr_auc, 3),
                b.map(|b| report::threshold(b.config_value))
                    .unwrap_or_else(|| "–".into()),
                num(b.and_then(|b| b.rates.precision), 3),
                num(b.and_then(|b| b.rates.recall), 3),
                num(b.and_then(|b| b.rates.f1), 3),
                pt,
                pr,
                ft,
                fr,
            ]);
        }
        s.push_str(&t.render());
        s.push('\n');
        let mut f = Table::new(&["scorer", "fixed threshold", "P", "R", "F1", "FPR"]);
        for sc in &g.scorers {
            for fp in &sc.fixed {
                f.row(vec![
                    format!("`{}`", sc.scorer.as_str()),
                    fp.name.clone(),
                    num(fp.rates.precision, 3),
                    num(fp.rates.recall, 3),
                    num(fp.rates.f1, 3),
                    num(fp.rates.fpr, 3),
                ]);
            }
        }
        s.push_str(&f.render());
        s.push('\n');
        if let Some((_, files)) = charts.iter().find(|(name, _)| *name == g.group) {
            for file in files {
                s.push_str(&format!("![{file}]({file})\n"));
            }
            s.push('\n');
        }
    }
    s.push_str("## Scorers\n\n");
    for sc in Scorer::ALL {
        s.push_str(&format!("- `{}`: {}\n", sc.as_str(), sc.description()));
    }
    s.push_str(&format!(
        "\nEmbedding: {} distinct texts, {} embedded by the model, {:.1} s.\n",
        r.embedding.texts, r.embedding.embedded, r.embedding.seconds
    ));
    s
}

/// The `[detect.similarity]` snippet with the recommended thresholds.
pub fn config_snippet(r: &PairsReport) -> String {
    let mut header = vec![
        format!(
            "Similarity thresholds recommended by `loopguard calibrate pairs` (loopguard {}).",
            r.loopguard_version
        ),
        format!("Rule: {}, loopguard's matcher.", r.rule_description),
        "Paste into your loopguard config file, or pass this file with --config.".to_string(),
    ];
    let mut entries = Vec::new();
    for g in &r.groups {
        let Some(x) = &g.recommended else { continue };
        let measured = format!(
            "{} pairs: P {}, R {}, F1 {}, FPR {}",
            g.pairs,
            num(x.rates.precision, 3),
            num(x.rates.recall, 3),
            num(x.rates.f1, 3),
            num(x.rates.fpr, 3)
        );
        match g.kind {
            Some(k) => entries.push(SnippetEntry {
                table: "detect.similarity".into(),
                key: k.as_str().into(),
                value: report::threshold(x.value),
                comment: Some(match x.current {
                    Some(c) => format!("{measured} (was {})", report::threshold(c)),
                    None => measured,
                }),
            }),
            None if g.group == "all" && r.groups.len() > 1 => header.push(format!(
                "All pairs together (one threshold for every kind): {} on {measured}.",
                report::threshold(x.value)
            )),
            None => header.push(format!(
                "Pairs without a kind: {} on {measured}; set it for the kinds they stand for.",
                report::threshold(x.value)
            )),
        }
    }
    if entries.is_empty() {
        header
            .push("No kind got a recommendation: give pairs a `kind` (or a file a KIND=).".into());
    }
    report::snippet(&header, &entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_names_bad_fields() {
        let (a, b, l, k) =
            parse_pair(r#"{"a":"x","b":"y","label":1,"kind":"failure","id":7}"#).unwrap();
        assert_eq!(
            (a.as_str(), b.as_str(), l, k),
            ("x", "y", true, Some(PairKind::Failure))
        );
        let (.., l, k) = parse_pair(r#"{"a":"x","b":"y","label":false}"#).unwrap();
        assert_eq!((l, k), (false, None));
        let e = parse_pair(r#"{"a":"x","b":"y","label":2}"#).unwrap_err();
        assert_eq!(e.path, "label");
        let e = parse_pair(r#"{"a":"x","b":3,"label":0}"#).unwrap_err();
        assert_eq!(e.path, "b");
        let e = parse_pair(r#"{"a":"x","label":0}"#).unwrap_err();
        assert!(e.message.contains("missing field `b`"), "{e}");
        let e = parse_pair(r#"{"a":"x","b":"y","label":0,"kind":"failures"}"#).unwrap_err();
        assert_eq!(e.path, "kind");
        assert!(e.message.contains("tool_call"), "{e}");
        let e = parse_pair(r#"{"a":"x","b":"y","label":0} x"#).unwrap_err();
        assert!(e.message.contains("trailing"), "{e}");
        assert!(parse_pair("not json").is_err());
    }

    #[test]
    fn lexical_baselines() {
        assert_eq!(word_jaccard("a b c", "a b d"), 0.5);
        assert_eq!(word_jaccard("a, b", "b a"), 1.0);
        assert_eq!(word_jaccard("", ""), 1.0);
        assert_eq!(word_jaccard("a", ""), 0.0);
    }

    #[test]
    fn loopguard_scorer_mirrors_the_matcher() {
        let side = |t: &str| Side::of(t, 500);
        // Equal after normalisation: a match at any threshold.
        let s = score_pair(
            None,
            &side("Error at 10:00:00"),
            &side("error at 11:30:05"),
            0.2,
        );
        assert_eq!(s[0], f64::INFINITY);
        assert_eq!(s[2], 1.0);
        // Numbers differ: never a match, whatever the cosine.
        let s = score_pair(
            None,
            &side("3 tests failing"),
            &side("5 tests failing"),
            0.99,
        );
        assert_eq!(s[0], f64::NEG_INFINITY);
        assert_eq!(s[1], 0.99);
        // A failure message inside a longer one (24+ characters) is the same failure, even when
        // the longer one adds numbers.
        let short = "typeerror: cannot read property x";
        let long = "uncaught typeerror: cannot read property x in 3 places";
        assert_eq!(
            score_pair(Some(PairKind::Failure), &side(short), &side(long), 0.5)[0],
            f64::INFINITY
        );
        assert_eq!(
            score_pair(Some(PairKind::Response), &side(short), &side(long), 0.5)[0],
            f64::NEG_INFINITY
        );
        // Otherwise the cosine.
        assert_eq!(score_pair(None, &side("a b"), &side("c d"), 0.42)[0], 0.42);
    }
}
