//! The glob patterns `list` takes (`*`, `?`, `[abc]`, `[^a-z]`, `\x`, as Redis's `SCAN MATCH`), as
//! anchored PostgreSQL regular expressions, so the same pattern lists the same names in every store.
//!
//! Limit: every other character is matched literally (escaped); an unclosed `[` is a literal `[`.

/// `pattern` as an anchored regular expression for PostgreSQL's `~`.
pub(super) fn to_regex(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() * 2 + 2);
    out.push('^');
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '\\' if i + 1 < chars.len() => {
                i += 1;
                push_literal(&mut out, chars[i]);
            }
            '[' => match class_end(&chars, i) {
                Some(end) => {
                    push_class(&mut out, &chars[i + 1..end]);
                    i = end;
                }
                None => push_literal(&mut out, '['),
            },
            c => push_literal(&mut out, c),
        }
        i += 1;
    }
    out.push('$');
    out
}

/// Index of the `]` closing the class opened at `open`, skipping escaped characters.
fn class_end(chars: &[char], open: usize) -> Option<usize> {
    let mut j = open + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            ']' if j > open + 1 => return Some(j),
            _ => j += 1,
        }
    }
    None
}

/// A bracket expression: `^` or `!` first negates, `a-z` is a range, anything else is literal.
fn push_class(out: &mut String, body: &[char]) {
    out.push('[');
    let mut body = body;
    if let Some(('^' | '!', rest)) = body.split_first() {
        out.push('^');
        body = rest;
    }
    let mut k = 0;
    while k < body.len() {
        match body[k] {
            '\\' if k + 1 < body.len() => {
                k += 1;
                push_literal(out, body[k]);
            }
            '-' if k > 0 && k + 1 < body.len() => out.push('-'),
            c => push_literal(out, c),
        }
        k += 1;
    }
    out.push(']');
}

/// `c` matched literally: in PostgreSQL's advanced regular expressions a backslash before a
/// non-alphanumeric character makes it literal, inside brackets too; letters, digits and non-ASCII
/// characters are literal already (and a backslash before them would start an escape).
fn push_literal(out: &mut String, c: char) {
    if c.is_ascii() && !c.is_ascii_alphanumeric() {
        out.push('\\');
    }
    out.push(c);
}

#[cfg(test)]
mod tests {
    use super::to_regex;

    #[test]
    fn globs_become_anchored_literal_safe_regexes() {
        let cases = [
            ("*", "^.*$"),
            ("report-*", "^report\\-.*$"),
            ("a?c", "^a.c$"),
            ("lock:order:4[0-9]", "^lock\\:order\\:4[0-9]$"),
            ("x[^ab]", "^x[^ab]$"),
            ("x[!ab]", "^x[^ab]$"),
            ("a.b+c$", "^a\\.b\\+c\\$$"),
            ("esc\\*aped", "^esc\\*aped$"),
            ("open[", "^open\\[$"),
            ("ü*", "^ü.*$"),
            ("[]", "^\\[\\]$"),
        ];
        for (glob, regex) in cases {
            assert_eq!(to_regex(glob), regex, "{glob}");
        }
    }
}
