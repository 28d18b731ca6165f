//! How alike two texts of a pair are: loopguard's own rule (the engine's matcher) and the
//! baselines it is compared with (cosine alone, exact, word Jaccard, Levenshtein).

use super::*;

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

    pub(super) fn color(self) -> &'static str {
        match self {
            Scorer::Loopguard => PALETTE[0],
            Scorer::Cosine => PALETTE[5],
            Scorer::Exact => PALETTE[7],
            Scorer::Jaccard => PALETTE[1],
            Scorer::Levenshtein => PALETTE[2],
        }
    }

    pub(super) fn dash(self) -> Dash {
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

/// One side of a pair, prepared the way the engine prepares a text of the pair's kind.
pub(super) struct Side {
    pub(super) sig: TextSig,
    /// The whole normalised text, for the lexical baselines.
    pub(super) normalized: String,
}

impl Side {
    pub(super) fn of(kind: Option<PairKind>, text: &str, max_chars: usize) -> Side {
        let (channel, part) = PairKind::compared_as(kind);
        Side {
            sig: compared_text(channel, part, text, max_chars),
            normalized: normalize(text),
        }
    }
}

/// The scores of one pair, in [`Scorer::ALL`] order. loopguard's is the engine's own rule
/// ([`matching::rule_score`]): keys, containment, the resource and numbers guards, the cosine.
pub(super) fn score_pair(kind: Option<PairKind>, a: &Side, b: &Side, cos: f64) -> [f64; 5] {
    let (channel, part) = PairKind::compared_as(kind);
    let rule = matching::rule_score(channel, part, &a.sig, &b.sig, Some(cos as f32));
    // Keys decided (±∞), or the cosine decides: then the cosine as given, unrounded.
    let loopguard = if rule.is_infinite() {
        f64::from(rule)
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
