//! `[zookeeper]`: where the ensemble is and how this node proves who it is to it.
//!
//! Owns: the connect string, the session and connect timeouts, digest credentials (`auth_file`,
//! `auth_env`, or `auth` inline, noted as an inline secret), the ACL policy, TLS files and SASL
//! credentials, and their defaults.
//! Must not: connect to ZooKeeper (`zk` does, from [`ZookeeperConfig::settings`]), nor
//! echo a secret in a message.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::schema::{RawSasl, RawTls, RawZookeeper};
use super::validator::{NeededBy, Validator};
use super::{AclPolicy, Secret, ZookeeperConfig};
use crate::ensemble::AclId;

const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether every server of `connect` is on this host (`127.0.0.0/8`, `::1`, `localhost`): an
/// ensemble no other host can reach, where open nodes are a developer's, not a fleet's.
fn loopback_only(connect: &str) -> bool {
    let Ok((hosts, _)) = crate::ensemble::split_connect(connect) else {
        return false;
    };
    hosts.split(',').all(|server| {
        let server = server.trim();
        let server = server.strip_prefix("tcp://").unwrap_or(server);
        let host = match server.strip_prefix('[') {
            Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
            None => server.rsplit_once(':').map_or(server, |(host, _)| host),
        };
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

impl Validator<'_> {
    pub(super) fn zookeeper(&mut self, raw: RawZookeeper) -> Option<ZookeeperConfig> {
        let connect = raw.connect.get_ref().trim().to_owned();
        if let Err(err) = crate::ensemble::split_connect(&connect) {
            self.problem(raw.connect.span(), "zookeeper.connect", err.to_string());
        }
        let session_timeout = self.positive_duration(
            raw.session_timeout,
            "zookeeper.session_timeout",
            DEFAULT_SESSION_TIMEOUT,
        );
        let connect_timeout = self.positive_duration(
            raw.connect_timeout,
            "zookeeper.connect_timeout",
            DEFAULT_CONNECT_TIMEOUT,
        );
        // A client certificate is not counted: each host has its own, and a node closed to
        // one host's would be closed to its peers.
        let credentials_named = raw.auth.is_some()
            || raw.auth_env.is_some()
            || raw.auth_file.is_some()
            || raw.sasl.is_some();
        let auth = self.auth(raw.auth, raw.auth_env, raw.auth_file);
        let acl = match &raw.acl {
            Some(acl) => *acl.get_ref(),
            None if credentials_named => AclPolicy::Creator,
            None => AclPolicy::Open,
        };
        if let (Some(acl), false, AclPolicy::Creator) = (&raw.acl, credentials_named, acl) {
            self.problem(
                acl.span(),
                "zookeeper.acl",
                "\"creator\" needs credentials: set auth_file, auth_env, auth or sasl",
            );
        }
        if acl == AclPolicy::Open {
            let written = raw.acl.as_ref().map(|acl| acl.span().start);
            if written.is_some() || !loopback_only(&connect) {
                self.open_acl = Some(written);
            }
        }
        let read_acl = self.read_acl(raw.read_acl, acl);
        let tls = raw.tls.and_then(|tls| self.tls(tls, "zookeeper.tls"));
        let sasl = raw.sasl.and_then(|sasl| self.sasl(sasl));
        Some(ZookeeperConfig {
            connect,
            session_timeout,
            connect_timeout,
            auth,
            acl,
            read_acl,
            tls,
            sasl,
        })
    }

    /// `read_acl`: the identities that may read a closed ledger, each as ZooKeeper names it.
    fn read_acl(
        &mut self,
        raw: Option<Spanned<Vec<Spanned<String>>>>,
        acl: AclPolicy,
    ) -> Vec<AclId> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        if acl == AclPolicy::Open && !raw.get_ref().is_empty() {
            self.problem(
                raw.span(),
                "zookeeper.read_acl",
                "read_acl applies to closed nodes (acl = \"creator\", the default with \
                 credentials): open nodes are readable and writable by every client already",
            );
            return Vec::new();
        }
        raw.into_inner()
            .into_iter()
            .filter_map(|id| match AclId::parse(id.get_ref()) {
                Ok(parsed) => Some(parsed),
                Err(err) => {
                    self.problem(id.span(), "zookeeper.read_acl", err.to_string());
                    None
                }
            })
            .collect()
    }

    /// Digest credentials from `auth` itself (an inline secret, noted for `zkcron check`), from
    /// the variable `auth_env` names, or from the file `auth_file` names (a final newline is not
    /// part of them).
    fn auth(
        &mut self,
        auth: Option<Spanned<String>>,
        auth_env: Option<Spanned<String>>,
        auth_file: Option<Spanned<String>>,
    ) -> Option<Secret> {
        let set: Vec<(&str, Range<usize>)> = [
            ("zookeeper.auth", &auth),
            ("zookeeper.auth_env", &auth_env),
            ("zookeeper.auth_file", &auth_file),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value.as_ref()?.span())))
        .collect();
        if let [_, (key, span), ..] = set.as_slice() {
            let message = "set one of auth_file, auth_env and auth, not several";
            self.problem(span.clone(), *key, message);
            return None;
        }
        match (auth, auth_env, auth_file) {
            (Some(auth), None, None) => {
                self.inline_secrets
                    .push(("zookeeper.auth", auth.span().start));
                self.credentials(auth.get_ref(), auth.span(), "zookeeper.auth")
            }
            (None, Some(_), None) | (None, None, Some(_))
                if !self.looks_up(NeededBy::ZooKeeper) =>
            {
                None
            }
            (None, None, Some(file)) => {
                let text = self.read_file(&file, "zookeeper.auth_file")?;
                let value = text.trim_end_matches(['\n', '\r']);
                self.credentials(value, file.span(), "zookeeper.auth_file")
            }
            (None, Some(var), None) => match (self.env)(var.get_ref()) {
                Some(value) => self.credentials(&value, var.span(), "zookeeper.auth_env"),
                None => {
                    let message = format!("environment variable {} is not set", var.get_ref());
                    self.problem(var.span(), "zookeeper.auth_env", message);
                    None
                }
            },
            _ => None,
        }
    }

    /// The TLS files of `raw`, the table at `key` (`zookeeper.tls`, `delayed.tls`), read and
    /// checked to hold usable PEM.
    pub(super) fn tls(
        &mut self,
        raw: Spanned<RawTls>,
        key: &str,
    ) -> Option<crate::ensemble::TlsFiles> {
        let span = raw.span();
        let raw = raw.into_inner();
        let identity = match (&raw.cert, &raw.key) {
            (Some(cert), Some(pem_key)) => Some(Some((cert, pem_key))),
            (None, None) => Some(None),
            (Some(_), None) | (None, Some(_)) => {
                let message = "set both cert and key, or neither";
                self.problem(span.clone(), key, message);
                None
            }
        };
        if !self.looks_up(NeededBy::ZooKeeper) {
            return None;
        }
        let ca = self.read_file(&raw.ca, &format!("{key}.ca"));
        let identity = match identity {
            Some(Some((cert, pem_key))) => {
                let cert = self.read_file(cert, &format!("{key}.cert"));
                let pem_key = self.read_file(pem_key, &format!("{key}.key"));
                Some(
                    cert.zip(pem_key)
                        .map(|(cert, pem)| (cert, Secret::new(pem))),
                )
            }
            Some(None) => None,
            None => Some(None),
        };
        let files = crate::ensemble::TlsFiles {
            ca: ca?,
            identity: match identity {
                Some(pair) => Some(pair?),
                None => None,
            },
        };
        if let Err(reason) = files.check() {
            self.problem(span, key, reason);
            return None;
        }
        Some(files)
    }

    fn sasl(&mut self, raw: Spanned<RawSasl>) -> Option<crate::ensemble::SaslCredentials> {
        let span = raw.span();
        let raw = raw.into_inner();
        if !raw.mechanism.get_ref().eq_ignore_ascii_case("digest-md5") {
            let message = "expected \"digest-md5\" (the mechanism ZooKeeper's SASL provider offers without Kerberos)";
            self.problem(raw.mechanism.span(), "zookeeper.sasl.mechanism", message);
        }
        let password = match (&raw.password_env, &raw.password_file) {
            (Some(_), None) | (None, Some(_)) if !self.looks_up(NeededBy::ZooKeeper) => None,
            (Some(var), None) => match (self.env)(var.get_ref()).filter(|p| !p.is_empty()) {
                Some(password) => Some(password),
                None => {
                    let message =
                        format!("environment variable {} is not set or empty", var.get_ref());
                    self.problem(var.span(), "zookeeper.sasl.password_env", message);
                    None
                }
            },
            (None, Some(file)) => self
                .read_file(file, "zookeeper.sasl.password_file")
                .map(|text| text.trim_end_matches(['\n', '\r']).to_owned()),
            _ => {
                let message = "set exactly one of password_env and password_file";
                self.problem(span, "zookeeper.sasl", message);
                None
            }
        }?;
        Some(crate::ensemble::SaslCredentials {
            username: raw.username.into_inner(),
            password: Secret::new(password),
        })
    }

    fn credentials(&mut self, value: &str, span: Range<usize>, context: &str) -> Option<Secret> {
        match value.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                Some(Secret::new(value))
            }
            // Never echo the value: it is a secret.
            _ => {
                self.problem(
                    span,
                    context,
                    "expected digest credentials as \"user:password\"",
                );
                if let Some(problem) = self.problems.last_mut() {
                    problem.secret = true;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ensemble_on_this_host_alone_is_loopback_only() {
        for here in [
            "127.0.0.1:2181",
            "localhost:2181,127.0.0.2:2182/app",
            "[::1]:2181",
        ] {
            assert!(loopback_only(here), "{here}");
        }
        for beyond in [
            "zk1:2181",
            "127.0.0.1:2181,10.0.0.5:2181",
            "[2001:db8::1]:2181",
            "/x",
        ] {
            assert!(!loopback_only(beyond), "{beyond}");
        }
    }
}
