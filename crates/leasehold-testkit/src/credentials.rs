//! Credentials a topology puts on its servers, and how they appear in URLs.

use std::fmt;

/// A password, optionally with an ACL user name, required by a set of servers.
///
/// Without a user it is the `default` user's password (`requirepass`); with a user, that ACL user is
/// created with every permission and the passwordless `default` user is switched off.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The ACL user; `None` means the `default` user with `requirepass`.
    user: Option<String>,
    /// The password; printed only inside URLs the caller asks for, never by `Debug`.
    password: String,
}

impl Credentials {
    /// The `default` user's password (`requirepass`).
    pub fn password(password: &str) -> Self {
        Self {
            user: None,
            password: password.to_owned(),
        }
    }

    /// An ACL user with every permission; the `default` user is switched off.
    pub fn user(user: &str, password: &str) -> Self {
        Self {
            user: Some(user.to_owned()),
            password: password.to_owned(),
        }
    }

    /// The ACL user name, if any.
    pub fn user_name(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password.
    pub fn secret(&self) -> &str {
        &self.password
    }

    /// The URL user-info part without the `@`: `user:password` or `:password`, percent-encoded.
    pub fn userinfo(&self) -> String {
        format!(
            "{}:{}",
            encode(self.user.as_deref().unwrap_or("")),
            encode(&self.password)
        )
    }

    /// `redis-server` arguments that put these credentials on a data node.
    pub(crate) fn apply(&self, builder: crate::RedisServerBuilder) -> crate::RedisServerBuilder {
        match &self.user {
            Some(user) => builder.acl_user(user, &self.password),
            None => builder.password(&self.password),
        }
    }

    /// `redis-server` arguments a replica needs to authenticate to its primary with these credentials.
    pub(crate) fn replication_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(user) = &self.user {
            args.extend(["--masteruser".to_owned(), user.clone()]);
        }
        args.extend(["--masterauth".to_owned(), self.password.clone()]);
        args
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters, so any password fits in a URL.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_encoded_and_debug_hides_the_password() {
        assert_eq!(Credentials::password("p w").userinfo(), ":p%20w");
        assert_eq!(Credentials::user("app", "a@b").userinfo(), "app:a%40b");
        assert!(!format!("{:?}", Credentials::password("hunter2")).contains("hunter2"));
    }
}
