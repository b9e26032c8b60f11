//! Cutting text into terms: Unicode word segmentation (UAX #29), then lowercasing, then
//! optionally stop words left out and Snowball stemming, as a field's [`Analyzer`] says.
//!
//! Invariant: a query is cut with the analyzer its field was indexed with (the root records
//! it), so a term a document holds is found by a query holding the same word.

use crate::format::text::{Analyzer, MAX_TERM_BYTES};
use unicode_segmentation::UnicodeSegmentation;

/// Lucene's English stop words (its `EnglishAnalyzer` set): what `stop_words` leaves out.
pub const ENGLISH_STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// Appends the terms of `text` to `out`, in order (repeats kept: a term's count in a document
/// is its frequency).
pub fn analyze(text: &str, a: &Analyzer, out: &mut Vec<String>) {
    let stemmer =
        (a.stemmer == 1).then(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));
    for word in text.unicode_words() {
        let mut t = if a.lowercase {
            word.to_lowercase()
        } else {
            word.to_string()
        };
        if a.stop_words && ENGLISH_STOP_WORDS.contains(&t.as_str()) {
            continue;
        }
        if let Some(s) = &stemmer {
            t = s.stem(&t).into_owned();
        }
        if t.len() > MAX_TERM_BYTES {
            let mut end = MAX_TERM_BYTES;
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            t.truncate(end);
        }
        if !t.is_empty() {
            out.push(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str, a: &Analyzer) -> Vec<String> {
        let mut v = Vec::new();
        analyze(text, a, &mut v);
        v
    }

    #[test]
    fn words_are_cut_at_unicode_boundaries_and_lowercased() {
        let a = Analyzer::default();
        assert_eq!(
            terms(
                "Type annotations for boto3 SecretsManager 1.43.0, the mypy-boto3-builder!",
                &a
            ),
            [
                "type",
                "annotations",
                "for",
                "boto3",
                "secretsmanager",
                "1.43.0",
                "the",
                "mypy",
                "boto3",
                "builder"
            ]
        );
        assert_eq!(
            terms("Grüße, ΣΊΣΥΦΟΣ — naïve café", &a),
            ["grüße", "σίσυφος", "naïve", "café"]
        );
        assert!(terms("  ... --- !!! ", &a).is_empty());
    }

    #[test]
    fn stop_words_and_stemming_when_asked() {
        let a = Analyzer {
            stemmer: 1,
            stop_words: true,
            ..Analyzer::default()
        };
        assert_eq!(
            terms("The parsers are parsing the running files", &a),
            ["parser", "pars", "run", "file"]
        );
        let keep_case = Analyzer {
            lowercase: false,
            ..Analyzer::default()
        };
        assert_eq!(terms("Django ORM", &keep_case), ["Django", "ORM"]);
    }
}
