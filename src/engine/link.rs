//! The link stage: compare the new event with the task's window. Keys decide first (the exact
//! fast path: an exact or normalised repeat never touches the model); otherwise the texts the
//! keys cannot decide are embedded — in one model call per round, calls and messages before
//! results — and compared by cosine ([`crate::detect::matching`]).

use super::{Engine, EngineError, Pass};
use crate::config::DetectConfig;
use crate::detect::matching::{self, Part};
use crate::detect::rules::{self, Input};
use crate::state::TaskState;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

impl Engine {
    pub(super) async fn link(
        &self,
        state: &mut TaskState,
        pass: &mut Pass,
    ) -> Result<(), EngineError> {
        let detect = &self.cfg.detect;
        let exact = matching::exact_identity(detect, state, &pass.entry);
        for round in 0..3 {
            let pending = match round {
                0 | 1 if exact => continue,
                0 => matching::needed(detect, state, &pass.entry, Part::Main),
                1 => matching::needed(detect, state, &pass.entry, Part::Result),
                // The dead-end rules compare recent calls with this one, whatever their keys
                // said, when this call ended where a recent one did.
                // A rule with a section of its own may look further back or at fewer
                // occurrences: its calls are compared too.
                _ => for_every_rule(
                    detect,
                    |cfg| matching::attempts_needed(cfg, state, &pass.entry),
                    |a, b| a == b,
                ),
            };
            if pending.is_empty() {
                continue;
            }
            let texts: Vec<String> = pending
                .iter()
                .filter_map(|p| matching::sig_at(state, &pass.entry, *p).map(|t| t.text.clone()))
                .collect();
            let vectors = self.embed_round(pass, &texts).await?;
            for (p, v) in pending.iter().zip(vectors) {
                if let Some(sig) = matching::sig_mut(state, &mut pass.entry, *p) {
                    sig.vector = Some(v);
                }
            }
        }
        // The span rule asks whether the changes between runs of a failing step are one change
        // reworded: compare what differs between them (a fourth round, rare).
        let pairs = if rules::wants(detect, Input::ChangeCosines) {
            for_every_rule(
                detect,
                |cfg| {
                    crate::detect::dead_end::changes_to_compare(&cfg.dead_ends, state, &pass.entry)
                },
                |a, b| (a.0, a.1) == (b.0, b.1),
            )
        } else {
            Vec::new()
        };
        if !pairs.is_empty() {
            let texts: Vec<String> = pairs
                .iter()
                .flat_map(|(_, _, a, b)| [a.clone(), b.clone()])
                .collect();
            let vectors = self.embed_round(pass, &texts).await?;
            pass.change_cosines = pairs
                .iter()
                .zip(vectors.chunks(2))
                .map(|((a, b, _, _), v)| (*a, *b, crate::embed::cosine(&v[0], &v[1])))
                .collect();
        }
        // Templated texts: compare the slots they fill in differently (a fifth round, rare).
        let slots = matching::slots_to_compare(detect, state, &pass.entry);
        let mut slot_cosines = Vec::new();
        if !slots.is_empty() {
            let texts: Vec<String> = slots
                .iter()
                .flat_map(|(_, a, b)| [a.clone(), b.clone()])
                .collect();
            let vectors = self.embed_round(pass, &texts).await?;
            slot_cosines = slots
                .iter()
                .zip(vectors.chunks(2))
                .map(|((seq, _, _), v)| (*seq, crate::embed::cosine(&v[0], &v[1])))
                .collect();
            for ((seq, a, b), (_, c)) in slots.iter().zip(&slot_cosines) {
                tracing::debug!(
                    seq = pass.entry.seq,
                    against = seq,
                    cosine = c,
                    slot = %a.chars().take(80).collect::<String>(),
                    earlier = %b.chars().take(80).collect::<String>(),
                    "templated text compared on its slot"
                );
            }
        }
        // A short turn: is it a courtesy (thanks, goodbye)? Compared with the courtesies, which
        // the embedding cache keeps after the first time.
        if let Some(text) = rules::wants(detect, Input::CourtesyTurns)
            .then(|| crate::detect::collaboration::courtesy_candidate(detect, state, &pass.entry))
            .flatten()
        {
            let mut texts = vec![text.to_string()];
            texts.extend(courtesy_texts(self.cfg.model.max_text_chars));
            let vectors = self.embed_round(pass, &texts).await?;
            let best = vectors[1..]
                .iter()
                .map(|v| crate::embed::cosine(&vectors[0], v))
                .fold(f32::NEG_INFINITY, f32::max);
            pass.entry.courtesy = best >= detect.collaboration.courtesy_similarity;
            tracing::debug!(
                seq = pass.entry.seq,
                cosine = best,
                courtesy = pass.entry.courtesy,
                text = %texts[0].chars().take(90).collect::<String>(),
                "short turn compared with the courtesies"
            );
        }
        pass.timed_detect(|pass| {
            pass.links = matching::links(detect, state, &pass.entry);
            matching::compare_slots(
                detect,
                pass.entry.body.channel(),
                &mut pass.links,
                &slot_cosines,
            );
            matching::settle_identity(&mut pass.entry, &pass.links);
        });
        Ok(())
    }
}

impl Engine {
    /// One round's texts embedded (the cache first), timed and counted on the pass.
    async fn embed_round(
        &self,
        pass: &mut Pass,
        texts: &[String],
    ) -> Result<Vec<crate::embed::Vector>, EngineError> {
        let started = Instant::now();
        let misses_before = self.embedder.stats().cache_misses.load(Relaxed);
        let vectors = self.embedder.embed(texts).await?;
        let t = &mut pass.timings;
        t.embed_secs += started.elapsed().as_secs_f64();
        t.texts_embedded += texts.len();
        t.used_model |= self.embedder.stats().cache_misses.load(Relaxed) > misses_before;
        Ok(vectors)
    }
}

/// The courtesies as the model is given texts (normalised like every text it embeds).
pub(crate) fn courtesy_texts(max_chars: usize) -> Vec<String> {
    crate::detect::collaboration::COURTESIES
        .iter()
        .map(|c| super::observe::text_sig(c, max_chars).text)
        .collect()
}

/// What the link stage computes for the rules: for the shared configuration and, once each, for
/// every rule's own section (which may look further back, or at fewer occurrences).
fn for_every_rule<T>(
    detect: &DetectConfig,
    wanted: impl Fn(&DetectConfig) -> Vec<T>,
    same: impl Fn(&T, &T) -> bool,
) -> Vec<T> {
    let mut all = wanted(detect);
    for own in detect.own.values() {
        for item in wanted(own) {
            if !all.iter().any(|a| same(a, &item)) {
                all.push(item);
            }
        }
    }
    all
}
