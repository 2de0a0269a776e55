//! The etcd keys of a lease name, and the glob that `list` matches names with.
//!
//! Layout under the client's prefix `P`, for the name `N`:
//! * `P/{N}/<token>`: one key per contender (the holder and every waiter), attached to the
//!   contender's own etcd lease; the holder is the one with the lowest create revision.
//! * `P/{N}`: the record of the last fence issued for the name (its mod revision), so that `status`
//!   still shows the last fence after the holder left; attached to the writing client's retention
//!   lease (`retention.rs`), so that it goes the retention after its last write.
//! * `P/{N}#note`: a note the holder wrote beside the lease (an election's leader record), on the
//!   same retention lease; outside the queue's range, and not a name to `list`.
//!
//! Braces are refused in names and prefixes, so `P/{N}/` is never a prefix of another name's keys
//! (it would need a name starting with `N}/`), and one range read sees one name's queue only.

/// The keys of one lease name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdKeys {
    /// The fence record: its mod revision is the last fence issued for the name.
    pub(crate) record: String,
    /// Prefix of the contenders' keys (`record` + `/`); what status shows as the key.
    pub(crate) queue: String,
    /// The holder's note (`record` + `#note`).
    pub(crate) note: String,
}

impl EtcdKeys {
    /// Keys for a name already checked by `validate_name`.
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let record = format!("{prefix}/{{{name}}}");
        let queue = format!("{record}/");
        let note = format!("{record}#note");
        EtcdKeys {
            record,
            queue,
            note,
        }
    }

    /// The key of the contender holding `token`.
    pub(crate) fn contender(&self, token: &str) -> String {
        format!("{}{token}", self.queue)
    }
}

/// What every key of the prefix starts with (for `list`).
pub(crate) fn names_start(prefix: &str) -> String {
    format!("{prefix}/{{")
}

/// The name a key of the prefix belongs to: `P/{N}` and `P/{N}/…` give `N`.
pub(crate) fn name_of<'k>(names_start: &str, key: &'k str) -> Option<&'k str> {
    let rest = key.strip_prefix(names_start)?;
    let end = rest.find('}')?;
    let tail = &rest[end + 1..];
    (tail.is_empty() || tail.starts_with('/')).then(|| &rest[..end])
}

/// Redis-style glob: `*` any run, `?` one character, `[abc]`, `[a-z]`, `[^a]` a class, `\x` the
/// character `x` itself. The same patterns `list` takes on Redis, so a pattern means the same on
/// every store.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = name.chars().collect();
    matches_from(&p, &s)
}

fn matches_from(p: &[char], s: &[char]) -> bool {
    // Iterative with one backtrack point for the last `*`: linear in practice, never exponential.
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                '[' => {
                    if let Some((hit, next)) = class(p, pi, s[si]) {
                        if hit {
                            pi = next;
                            si += 1;
                            continue;
                        }
                    } else if s[si] == '[' {
                        // An unclosed `[` is the character itself.
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
                '\\' if pi + 1 < p.len() => {
                    if p[pi + 1] == s[si] {
                        pi += 2;
                        si += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[si] {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Matches `c` against the class opening at `p[open]`; `(hit, index after the class)`, or `None`
/// when the class is not closed.
fn class(p: &[char], open: usize, c: char) -> Option<(bool, usize)> {
    let mut i = open + 1;
    let negate = p.get(i) == Some(&'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() {
        let lo = p[i];
        if lo == ']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        let lo = if lo == '\\' && i + 1 < p.len() {
            i += 1;
            p[i]
        } else {
            lo
        };
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&h| h != ']') {
            let hi = p[i + 2];
            let (a, b) = if lo <= hi { (lo, hi) } else { (hi, lo) };
            hit |= a <= c && c <= b;
            i += 3;
        } else {
            hit |= lo == c;
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_per_range_and_back() {
        let k = EtcdKeys::new("leasehold", "orders/eu");
        assert_eq!(k.record, "leasehold/{orders/eu}");
        assert_eq!(k.queue, "leasehold/{orders/eu}/");
        assert_eq!(k.contender("ab"), "leasehold/{orders/eu}/ab");
        // A name that extends another does not fall into its queue range.
        let longer = EtcdKeys::new("leasehold", "orders/eu/x");
        assert!(!longer.contender("ab").starts_with(&k.queue));
        assert!(!longer.record.starts_with(&k.queue));
        let start = names_start("leasehold");
        assert_eq!(name_of(&start, &k.record), Some("orders/eu"));
        assert_eq!(name_of(&start, &k.contender("ab")), Some("orders/eu"));
        assert_eq!(name_of(&start, "leasehold/{x}junk"), None);
        assert_eq!(name_of(&start, "other/{x}"), None);
        // The note is neither in the queue's range nor a name of its own.
        assert_eq!(k.note, "leasehold/{orders/eu}#note");
        assert!(!k.note.starts_with(&k.queue));
        assert_eq!(name_of(&start, &k.note), None);
    }

    #[test]
    fn globs_mean_what_they_mean_on_redis() {
        let yes = [
            ("*", "anything"),
            ("*", ""),
            ("report-*", "report-a"),
            ("report-?", "report-b"),
            ("r*t-*", "report-b"),
            ("[ab]x", "bx"),
            ("[a-c]x", "cx"),
            ("[^a]x", "bx"),
            ("a\\*", "a*"),
            ("*a*b*", "xxaxxbxx"),
            ("[", "["),
        ];
        let no = [
            ("report-*", "zeta"),
            ("report-?", "report-ab"),
            ("[ab]x", "cx"),
            ("[^a]x", "ax"),
            ("a\\*", "ab"),
            ("*a*b", "xxaxxbxxc"),
            ("", "a"),
        ];
        for (p, s) in yes {
            assert!(glob_match(p, s), "{p} should match {s}");
        }
        for (p, s) in no {
            assert!(!glob_match(p, s), "{p} should not match {s}");
        }
    }
}
