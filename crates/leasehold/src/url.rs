//! One way to show a connection URL without its secrets, used by every message, log line, `Debug`
//! output and report that prints a store or database URL.
//!
//! Promise: the password of the userinfo (`scheme://user:PASSWORD@host…`, also in multi-host URLs such
//! as `redis-sentinel://:pw@h1,h2#master`) and the values of query parameters that carry secrets
//! (`password=`, `pass=`, `pwd=`, `secret=`, `token=`, `auth=`) are replaced by `***`, even when the
//! password itself holds `/`, `?`, `#` or `@`. Limit: a secret written anywhere else in the URL (a
//! path segment, an unusual parameter name) is shown as given.

use std::fmt;

use crate::error::{Error, Result};

/// `%XX` escapes in a part of a store URL (a user name, a password, a query value), decoded the one
/// way every store decodes them (sqlx, which reads PostgreSQL's and MariaDB's URLs, does the same):
/// a `%` not followed by two hex digits stays as written (`100%`, `%zz`); `None` when the decoded
/// bytes are not UTF-8.
#[cfg(any(feature = "redis", feature = "etcd"))]
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`) percent-escaped: a
/// user name or password put back into a URL for a driver.
#[cfg(feature = "redis")]
pub(crate) fn percent_encode(s: &str) -> String {
    const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, RESERVED).to_string()
}

/// A store URL read once: its scheme, the text the store's driver needs (secrets included) and the
/// form every message, log line and report shows ([`redact`]ed). The registry reads the URL into
/// this and hands it to the store the scheme picks, so that no store reads or redacts it again;
/// `Display` and `Debug` show only the redacted form.
///
/// ```
/// use leasehold::url::StoreUrl;
/// let url = StoreUrl::parse("redis://app:s3cret@10.0.0.5:6379/0").unwrap();
/// assert_eq!(url.scheme(), "redis");
/// assert_eq!(url.redacted(), "redis://app:***@10.0.0.5:6379/0");
/// assert_eq!(url.to_string(), "redis://app:***@10.0.0.5:6379/0");
/// assert!(StoreUrl::parse("127.0.0.1:6379").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl {
    full: String,
    scheme_len: usize,
    redacted: String,
}

impl StoreUrl {
    /// Reads `url`: it must be `scheme://…` with a scheme of letters, digits, `+`, `-` and `.`
    /// (starting with a letter), and hold no whitespace or control character (a password that does
    /// is percent-escaped). Whether the scheme
    /// is one this build knows, and what follows it, are for the registry and the store to judge.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] (`what`: "store url") saying what is wrong, with the URL redacted.
    pub fn parse(url: &str) -> Result<StoreUrl> {
        let redacted = redact(url);
        let bad = |why: String| Error::invalid("store url", why);
        if url.trim().is_empty() {
            return Err(bad(
                "it is empty; give one such as redis://127.0.0.1:6379".to_owned()
            ));
        }
        if url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("sqlite:"))
        {
            return Err(bad(format!(
                "`{redacted}` is an SQLite database, and SQLite holds no leases (one file on one \
                 machine cannot exclude workers on others): keep leases in Redis (redis://), \
                 PostgreSQL (postgres://), MariaDB/MySQL (mysql://) or etcd (etcd://); SQLite \
                 serves the guards beside them (fenced writes, idempotency keys, the inbox: \
                 db::Database)"
            )));
        }
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(bad(format!(
                "`{redacted}` has no scheme; write it as scheme://host… (redis://, postgres://, …)"
            )));
        };
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !scheme_ok {
            return Err(bad(format!(
                "`{redacted}` does not start with a scheme (letters, digits, `+`, `-`, `.` before `://`)"
            )));
        }
        if let Some((at, c)) = url
            .char_indices()
            .find(|(_, c)| c.is_whitespace() || c.is_control())
        {
            let what = if c.is_control() {
                format!("the control character {c:?}")
            } else if c == ' ' {
                "a space".to_owned()
            } else {
                format!("the whitespace {c:?}")
            };
            return Err(bad(format!(
                "`{}` holds {what} at byte {at}; a URL holds none (percent-escape it, e.g. %20 for a space, where it belongs in a password)",
                redacted.escape_debug()
            )));
        }
        Ok(StoreUrl {
            full: url.to_owned(),
            scheme_len: scheme.len(),
            redacted,
        })
    }

    /// The scheme, as written (`redis`, `postgres`, …).
    pub fn scheme(&self) -> &str {
        &self.full[..self.scheme_len]
    }

    /// The URL with its secrets hidden: what messages, `status` and `list` print.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The URL as given, secrets included: for the store's driver only, never for a message.
    pub fn expose(&self) -> &str {
        &self.full
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoreUrl").field(&self.redacted).finish()
    }
}

/// `url` with its secrets replaced by `***`; the user name, hosts, path and other parameters stay, so
/// the message still says where it tried to connect.
///
/// ```
/// use leasehold::url::redact;
/// assert_eq!(redact("redis://app:s3cret@10.0.0.5:6379/0"), "redis://app:***@10.0.0.5:6379/0");
/// assert_eq!(redact("postgres://db/app?user=x&password=hunter2"), "postgres://db/app?user=x&password=***");
/// ```
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // No scheme (`user:pw@host`, or one mistyped as `redis//:pw@host`): whatever precedes an `@`
        // that a host follows may hold credentials, and is hidden whole.
        return match userinfo_end(url) {
            Some(at) => format!("***{}", redact_query(&url[at..])),
            None => redact_query(url),
        };
    };
    let (userinfo, tail) = match userinfo_end(rest) {
        Some(at) => (Some(&rest[..at]), &rest[at..]),
        None => (None, rest),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    out.push_str("://");
    if let Some(userinfo) = userinfo {
        match userinfo.split_once(':') {
            Some((user, _password)) => {
                out.push_str(user);
                out.push_str(":***");
            }
            // A lone userinfo may be a bare password or token: hide it all.
            None if userinfo.is_empty() => {}
            None => out.push_str("***"),
        }
    }
    out.push_str(&redact_query(tail));
    out
}

/// Where the userinfo ends (the index of its `@` in `rest`): the last `@` that is followed by
/// something shaped like a host list. An `@` inside a query value (`?user=a@b`) is not followed by a
/// host, so it is not taken for the end of a userinfo. Failing that, the last `@` with no host after it
/// (`scheme://:pw@`, a URL missing its host) still ends a userinfo, so that the password of a
/// malformed URL is hidden too.
pub(crate) fn userinfo_end(rest: &str) -> Option<usize> {
    let hosts_after = |at: usize| {
        let after = &rest[at + 1..];
        &after[..after.find(['/', '?', '#']).unwrap_or(after.len())]
    };
    rest.match_indices('@')
        .map(|(i, _)| i)
        .rev()
        .find(|&at| {
            let hosts = hosts_after(at);
            !hosts.is_empty()
                && hosts.chars().all(|c| {
                    c.is_ascii_alphanumeric()
                        || matches!(c, '.' | '-' | '_' | ':' | ',' | '[' | ']' | '%')
                })
        })
        // A URL with credentials and no host (`etcd://user:pw@`, `redis-cluster://:pw@`) is still
        // hidden, whatever the password holds: its last `@` followed by an empty host ends it.
        .or_else(|| rest.rfind('@').filter(|&at| hosts_after(at).is_empty()))
}

/// Replaces the values of secret-carrying query parameters.
fn redact_query(s: &str) -> String {
    let Some(q) = s.find('?') else {
        return s.to_owned();
    };
    let (head, query) = s.split_at(q + 1);
    let (query, fragment) = match query.find('#') {
        Some(h) => query.split_at(h),
        None => (query, ""),
    };
    let params: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if is_secret_key(k) => format!("{k}=***"),
            _ => kv.to_owned(),
        })
        .collect();
    format!("{head}{}{fragment}", params.join("&"))
}

fn is_secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    ["password", "pass", "pwd", "secret", "token", "auth"]
        .iter()
        .any(|s| k == *s || k.ends_with(&format!("_{s}")) || k.ends_with(&format!("-{s}")))
}

#[cfg(test)]
mod tests {
    use super::{redact, StoreUrl};
    use crate::error::Error;

    #[cfg(feature = "redis")]
    #[test]
    fn percent_escapes_decode_one_way_for_every_store() {
        use super::{percent_decode, percent_encode};
        for (written, decoded) in [
            ("p%40ss%3Aw", Some("p@ss:w")),
            ("100%", Some("100%")),
            ("%zz", Some("%zz")),
            ("%4", Some("%4")),
            ("%C3%A9", Some("\u{e9}")),
            ("%ff", None),
        ] {
            assert_eq!(percent_decode(written).as_deref(), decoded, "{written}");
        }
        for s in ["p@ss:w/rd?#", "\u{e9} ~-._", ""] {
            assert_eq!(percent_decode(&percent_encode(s)).as_deref(), Some(s));
        }
        assert_eq!(percent_encode("a b@c"), "a%20b%40c");
    }

    #[test]
    fn a_store_url_is_read_once_with_its_redacted_form() {
        let url = StoreUrl::parse("redis-sentinel://:pw@h1:26379,h2#m").unwrap();
        assert_eq!(url.scheme(), "redis-sentinel");
        assert_eq!(url.redacted(), "redis-sentinel://:***@h1:26379,h2#m");
        assert_eq!(url.expose(), "redis-sentinel://:pw@h1:26379,h2#m");
        assert!(!format!("{url} {url:?}").contains("pw@"), "{url:?}");
    }

    #[test]
    fn garbage_store_urls_are_refused_saying_what_is_wrong() {
        let cases = [
            ("", "empty"),
            ("   ", "empty"),
            ("127.0.0.1:6379", "no scheme"),
            ("redis:/h", "no scheme"),
            ("://h", "does not start with a scheme"),
            ("1redis://h", "does not start with a scheme"),
            ("re dis://h", "does not start with a scheme"),
            ("redis://h:6379\n", "control character"),
            ("redis://u:se cret@h", "a space"),
            ("sqlite:jobs.db", "SQLite holds no leases"),
            ("SQLITE://var/jobs.db?password=secret", "redis://"),
            ("ü://h", "does not start with a scheme"),
        ];
        for (given, says) in cases {
            match StoreUrl::parse(given) {
                Err(Error::Invalid { what, why }) => {
                    assert_eq!(what, "store url");
                    assert!(why.contains(says), "{given:?}: {why}");
                    assert!(!why.contains("cret"), "{given:?}: {why}");
                }
                other => panic!("{given:?}: expected Invalid, got {other:?}"),
            }
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        let cases = [
            (
                "redis://app:s3cret@127.0.0.1:6379/0",
                "redis://app:***@127.0.0.1:6379/0",
            ),
            ("rediss://:pw@h/", "rediss://:***@h/"),
            ("redis://h:1/", "redis://h:1/"),
            ("redis://tok3n@h:1", "redis://***@h:1"),
            ("redis://u:p/a?s#s@w@h:1/2", "redis://u:***@h:1/2"),
            (
                "redis-sentinel://:pw@h1:26379,h2:26380/0#mymaster",
                "redis-sentinel://:***@h1:26379,h2:26380/0#mymaster",
            ),
            (
                "redis-cluster://u:p@[::1]:7000,[::1]:7001",
                "redis-cluster://u:***@[::1]:7000,[::1]:7001",
            ),
            (
                "postgres://app:pw@db:5432/app?sslmode=require",
                "postgres://app:***@db:5432/app?sslmode=require",
            ),
            (
                "postgres://db/app?user=a@b&password=x",
                "postgres://db/app?user=a@b&password=***",
            ),
            (
                "etcd://u:p@10.0.0.1:2379,10.0.0.2:2379",
                "etcd://u:***@10.0.0.1:2379,10.0.0.2:2379",
            ),
            ("etcd://u:secret@", "etcd://u:***@"),
            ("etcd://u:se/cret@/x", "etcd://u:***@/x"),
            ("sqlite:/tmp/a.db", "sqlite:/tmp/a.db"),
            ("redis-cluster://:pw@", "redis-cluster://:***@"),
            ("redis-sentinel://u:pw@#m", "redis-sentinel://u:***@#m"),
            ("not a url", "not a url"),
            ("redis//:pw@127.0.0.1:6379", "***@127.0.0.1:6379"),
            ("app:pw@db.example:5432/app", "***@db.example:5432/app"),
        ];
        for (given, shown) in cases {
            assert_eq!(redact(given), shown, "{given}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        for s in [
            "",
            "://",
            "@",
            "a://@",
            "x://:@",
            "x://?",
            "x://a?=&&=#",
            "ü://ö:ä@ß",
        ] {
            let _ = redact(s);
        }
    }
}
