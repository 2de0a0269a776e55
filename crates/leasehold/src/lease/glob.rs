//! The glob patterns `list` takes, matched by one implementation for every store: each store reads
//! the names under its prefix and keeps those this matcher accepts, so a pattern lists the same
//! names on Redis, PostgreSQL, MariaDB, etcd and a store of your own.
//!
//! The syntax is Redis's `SCAN MATCH`: `*` any run of characters, `?` one character, `[abc]` one
//! of the characters, `[a-z]` a range (either way round), `[^a]` any but, `\x` the character `x`
//! itself (inside a class too). An unclosed `[` is the character `[`; `[]` matches nothing.
//! Matching is case-sensitive and by character (not byte).
//!
//! Promise: time proportional to the pattern's length times the name's, never more (one backtrack
//! point, the last `*`: a pathological pattern such as `*a*a*a…*b` costs what a plain one does).
//! Limit: no `{a,b}` alternatives, no `**`: a `*` crosses `:` and `/` like any character.

/// One step of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// `*`: any run of characters, empty included.
    Star,
    /// `?`: exactly one character.
    One,
    /// A literal character (`\x` included).
    Char(char),
    /// `[...]`: one character in (or, negated, not in) the inclusive ranges.
    Class {
        negate: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    /// Whether this single-character token accepts `c` (never asked of [`Token::Star`]).
    fn accepts(&self, c: char) -> bool {
        match self {
            Token::Star | Token::One => true,
            Token::Char(x) => *x == c,
            Token::Class { negate, ranges } => {
                ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negate
            }
        }
    }
}

/// A `list` pattern, compiled once and matched against many names.
///
/// ```
/// use leasehold::lease::Glob;
///
/// let g = Glob::new("jobs-[0-9]*");
/// assert!(g.matches("jobs-7-nightly"));
/// assert!(!g.matches("jobs-x"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
}

impl Glob {
    /// Compiles `pattern`. Every string is a pattern: nothing is refused here (the client refuses
    /// empty patterns and braces before a store sees them, [`check_pattern`](super::check_pattern)).
    pub fn new(pattern: &str) -> Self {
        let chars: Vec<char> = pattern.chars().collect();
        let mut tokens = Vec::with_capacity(chars.len());
        let mut i = 0;
        while i < chars.len() {
            let (token, used) = match chars[i] {
                '*' => (Token::Star, 1),
                '?' => (Token::One, 1),
                '\\' if i + 1 < chars.len() => (Token::Char(chars[i + 1]), 2),
                '[' => class(&chars[i + 1..])
                    .map(|(t, used)| (t, used + 1))
                    .unwrap_or((Token::Char('['), 1)),
                c => (Token::Char(c), 1),
            };
            // `**` is `*`: one backtrack point is enough.
            if !(token == Token::Star && tokens.last() == Some(&Token::Star)) {
                tokens.push(token);
            }
            i += used;
        }
        Glob { tokens }
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        let s: Vec<char> = name.chars().collect();
        let p = &self.tokens;
        let (mut pi, mut si) = (0, 0);
        // The last `*` seen and the position in the name it has swallowed up to.
        let mut star: Option<(usize, usize)> = None;
        while si < s.len() {
            match p.get(pi) {
                Some(Token::Star) => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                Some(t) if t.accepts(s[si]) => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
            // A mismatch: let the last `*` swallow one more character, or fail. Earlier stars need
            // no revisiting: whatever they could swallow, the last one can too.
            match star {
                Some((sp, ss)) => {
                    star = Some((sp, ss + 1));
                    pi = sp + 1;
                    si = ss + 1;
                }
                None => return false,
            }
        }
        p[pi..].iter().all(|t| *t == Token::Star)
    }
}

/// The class whose body starts at `body` (just after `[`), and how many characters it used up to
/// and including its `]`; `None` when no `]` closes it.
fn class(body: &[char]) -> Option<(Token, usize)> {
    let (negate, mut i) = match body.first() {
        Some('^') => (true, 1),
        _ => (false, 0),
    };
    let mut ranges = Vec::new();
    while i < body.len() {
        match body[i] {
            ']' => return Some((Token::Class { negate, ranges }, i + 1)),
            '\\' if i + 1 < body.len() => {
                ranges.push((body[i + 1], body[i + 1]));
                i += 2;
            }
            lo if i + 2 < body.len() && body[i + 1] == '-' && body[i + 2] != ']' => {
                let hi = body[i + 2];
                ranges.push((lo.min(hi), lo.max(hi)));
                i += 3;
            }
            c => {
                ranges.push((c, c));
                i += 1;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::Glob;
    use rand::RngExt;
    use std::time::{Duration, Instant};

    fn m(p: &str, s: &str) -> bool {
        Glob::new(p).matches(s)
    }

    #[test]
    fn globs_match_as_redis_scan_match_does() {
        let yes = [
            ("job*", "job-1"),
            ("*", ""),
            ("j?b", "jab"),
            ("[a-c]x", "bx"),
            ("[c-a]x", "bx"),
            ("[^a-c]x", "dx"),
            ("a\\*", "a*"),
            ("[x", "[x"),
            ("[\\]]", "]"),
            ("*:*", "a:b"),
            ("é?", "éü"),
            ("a**b", "ab"),
            ("*a*a*b", "xaayab"),
        ];
        for (p, s) in yes {
            assert!(m(p, s), "{p} should match {s}");
        }
        let no = [
            ("job*", "xjob"),
            ("j?b", "jb"),
            ("[^a-c]x", "bx"),
            ("a\\*", "ab"),
            ("[]", "]"),
            ("?", ""),
            ("Job", "job"),
            ("*a*a*b", "xaaya"),
        ];
        for (p, s) in no {
            assert!(!m(p, s), "{p} should not match {s}");
        }
    }

    /// The obvious recursive matcher (what the MariaDB store used): exponential on some patterns,
    /// right on all of them.
    fn reference(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('*') => (0..=s.len()).any(|i| reference(&p[1..], &s[i..])),
            Some('?') => !s.is_empty() && reference(&p[1..], &s[1..]),
            Some(c) => s.first() == Some(c) && reference(&p[1..], &s[1..]),
        }
    }

    #[test]
    fn agrees_with_the_recursive_matcher_on_random_patterns() {
        let mut rng = rand::rng();
        let alphabet = ['a', 'b', '*', '?'];
        for _ in 0..20_000 {
            let pat: Vec<char> = (0..rng.random_range(0..8))
                .map(|_| alphabet[rng.random_range(0..4)])
                .collect();
            let name: Vec<char> = (0..rng.random_range(0..8))
                .map(|_| alphabet[rng.random_range(0..2)])
                .collect();
            let (p, s): (String, String) = (pat.iter().collect(), name.iter().collect());
            assert_eq!(m(&p, &s), reference(&pat, &name), "{p:?} against {s:?}");
        }
    }

    #[test]
    fn a_pathological_pattern_is_matched_in_a_moment() {
        // 40 stars between `a`s and a final `b` against the longest name, 256 `a`s: the recursive
        // matcher tries on the order of C(256, 40) splits; this one at most 81 × 256 steps.
        let pattern = format!("{}b", "*a".repeat(40));
        let name = "a".repeat(crate::lease::MAX_NAME_LEN);
        let g = Glob::new(&pattern);
        let started = Instant::now();
        for _ in 0..100 {
            assert!(!g.matches(&name));
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(500),
            "100 matches took {took:?}"
        );
        assert!(g.matches(&format!("{name}b")));
    }
}
