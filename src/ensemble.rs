//! How to reach the ZooKeeper ensemble: the connect string and its chroot, the session timeout,
//! the credentials, the ACL policy, the TLS files and the SASL credentials, as the schedule
//! names them.
//!
//! Owns: these settings as plain data, splitting a connect string into hosts and chroot, and
//! checking that the TLS files hold usable PEM (for `zkcron check`).
//! Must not: connect (`zk` turns these settings into a session) or read files (`config` does).

use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::secret::Secret;

/// How to reach the ensemble.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkSettings {
    /// `host:port[,host:port…][/chroot]`, as for the Java client.
    pub connect: String,
    /// Requested session timeout; the server may negotiate it into its min/max bounds.
    pub session_timeout: Duration,
    /// Digest credentials `user:password`, sent on every new session.
    pub auth: Option<Secret>,
    /// ACL of every node zkcron creates.
    pub acl: AclPolicy,
    /// Identities that may read, not write, the nodes of a closed ([`AclPolicy::Creator`])
    /// ledger: a dashboard's.
    pub read_acl: Vec<AclId>,
    /// TLS to every server of the connect string (a `tcp://` prefix opts one out).
    pub tls: Option<TlsFiles>,
    /// SASL DIGEST-MD5 credentials, for ensembles that require SASL.
    pub sasl: Option<SaslCredentials>,
}

impl ZkSettings {
    /// Settings with no credentials and open ACLs.
    pub fn open(connect: impl Into<String>, session_timeout: Duration) -> Self {
        Self {
            connect: connect.into(),
            session_timeout,
            auth: None,
            acl: AclPolicy::Open,
            read_acl: Vec::new(),
            tls: None,
            sasl: None,
        }
    }
}

impl ZkSettings {
    /// Who the servers know a session with these settings as, for the audit trail:
    /// `digest:<user>`, `sasl:<user>`, and `x509:sha256:<fingerprint>` of the certificate (the
    /// servers' x509 provider names it by its subject; its fingerprint names it exactly and
    /// needs no certificate parser), joined with `, `; `None` with no credentials.
    pub fn identity(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(auth) = &self.auth {
            let user = auth.expose().split_once(':').map_or("", |(user, _)| user);
            parts.push(format!("digest:{user}"));
        }
        if let Some(sasl) = &self.sasl {
            parts.push(format!("sasl:{}", sasl.username));
        }
        let certificate = self.tls.as_ref().and_then(|tls| tls.identity.as_ref());
        let first = certificate
            .and_then(|(cert, _)| CertificateDer::pem_slice_iter(cert.as_bytes()).next());
        if let Some(Ok(der)) = first {
            let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der.as_ref());
            let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
            parts.push(format!("x509:sha256:{hex}"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// SASL DIGEST-MD5, as ZooKeeper's `SASLAuthenticationProvider` with a JAAS `Server` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    pub username: String,
    pub password: Secret,
}

/// Who may touch the znodes zkcron creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AclPolicy {
    /// world:anyone, all permissions.
    Open,
    /// Only sessions authenticated as the creator (needs credentials).
    Creator,
}

/// An identity as a ZooKeeper ACL names it: `digest:<user>:<hash>`, `sasl:<user>`,
/// `x509:<subject>` or `ip:<address>[/bits]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclId {
    pub scheme: String,
    pub id: String,
}

/// An ACL id that ZooKeeper would not match to any session.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadAclId {
    #[error(
        "{0:?} is not scheme:id (digest:<user>:<hash>, sasl:<user>, x509:<subject>, ip:<address>)"
    )]
    NoScheme(String),
    #[error(
        "scheme {0:?} is not one ZooKeeper authenticates sessions with: digest, sasl, x509 or ip"
    )]
    UnknownScheme(String),
    #[error(
        "a digest id names the user and the hash of its password, digest:<user>:<hash>, where \
         <hash> is the base64 of SHA-1 of `user:password`: printf %s 'user:password' | openssl \
         dgst -binary -sha1 | base64"
    )]
    DigestWithoutHash,
}

impl AclId {
    /// Reads `scheme:id` as the schedule writes it.
    ///
    /// # Errors
    /// No scheme, a scheme ZooKeeper does not authenticate with, or a digest id without the
    /// password's hash (ZooKeeper matches digest sessions by it, never by the user alone).
    pub fn parse(text: &str) -> Result<Self, BadAclId> {
        let Some((scheme, id)) = text.split_once(':').filter(|(_, id)| !id.is_empty()) else {
            return Err(BadAclId::NoScheme(text.to_owned()));
        };
        if !["digest", "sasl", "x509", "ip"].contains(&scheme) {
            return Err(BadAclId::UnknownScheme(scheme.to_owned()));
        }
        // SHA-1's 20 bytes are 28 characters of base64.
        let hashed = |hash: &str| hash.len() == 28 && hash.ends_with('=');
        if scheme == "digest" && !id.split_once(':').is_some_and(|(_, hash)| hashed(hash)) {
            return Err(BadAclId::DigestWithoutHash);
        }
        Ok(Self {
            scheme: scheme.to_owned(),
            id: id.to_owned(),
        })
    }
}

/// The PEM texts TLS needs, read from the files the schedule names.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA certificates (and CRLs) that sign the servers' certificates.
    pub ca: String,
    /// This node's certificate and key, for servers that ask for them (ZooKeeper's default).
    pub identity: Option<(String, Secret)>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("identity", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl TlsFiles {
    /// Whether the texts are PEM that TLS can use: at least one CA certificate, and a
    /// certificate with its private key when an identity is given. `zk` parses them again when
    /// it connects, with the same PEM reader.
    ///
    /// # Errors
    /// A text is not usable PEM; the message says which.
    pub fn check(&self) -> Result<(), String> {
        let no_ca = |why: &dyn std::fmt::Display| {
            format!("the CA file holds no usable PEM certificate: {why}")
        };
        let cas = CertificateDer::pem_slice_iter(self.ca.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| no_ca(&err))?;
        if cas.is_empty() {
            return Err(no_ca(&"no certificate found"));
        }
        let Some((cert, key)) = &self.identity else {
            return Ok(());
        };
        let no_pair = |why: &dyn std::fmt::Display| {
            format!("the certificate and key are not a usable PEM pair: {why}")
        };
        let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| no_pair(&err))?;
        if certs.is_empty() {
            return Err(no_pair(&"no certificate found"));
        }
        PrivateKeyDer::from_pem_slice(key.expose().as_bytes()).map_err(|err| no_pair(&err))?;
        Ok(())
    }

    /// A rustls client configuration that trusts the CA certificates and presents the identity,
    /// if any: what a TLS client of ZooKeeper or of the delayed store's PostgreSQL needs.
    ///
    /// # Errors
    /// A text is not usable PEM, or rustls refused a certificate or the key; the message says
    /// which.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        self.check()?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca.as_bytes()).flatten() {
            roots
                .add(cert)
                .map_err(|err| format!("a CA certificate is not usable: {err}"))?;
        }
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        match &self.identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .flatten()
                    .collect();
                let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
                    .map_err(|err| format!("the key is not usable: {err}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|err| format!("the certificate and key are not a usable pair: {err}"))
            }
            None => Ok(builder.with_no_client_auth()),
        }
    }
}

/// A connect string that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid zookeeper connect string {connect:?}: {reason}")]
pub struct BadConnectString {
    pub connect: String,
    pub reason: &'static str,
}

/// The hosts part and the optional chroot of a connect string.
///
/// # Errors
/// The chroot is not an absolute path without a trailing slash, or there are no hosts.
pub fn split_connect(connect: &str) -> Result<(&str, Option<&str>), BadConnectString> {
    let bad = |reason| BadConnectString {
        connect: connect.to_owned(),
        reason,
    };
    let (hosts, chroot) = match connect.find('/') {
        Some(i) => (&connect[..i], Some(&connect[i..])),
        None => (connect, None),
    };
    if hosts.trim().is_empty() {
        return Err(bad("no hosts before the chroot"));
    }
    match chroot {
        Some("/") => Ok((hosts, None)),
        Some(path) if path.ends_with('/') || path.contains("//") => {
            Err(bad("chroot must not end in '/' or contain '//'"))
        }
        chroot => Ok((hosts, chroot)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acl_id_is_one_zookeeper_can_match_to_a_session() {
        let hash = "+Ir5sN1lGJEEs8xBZhZXKvjLJ7c=";
        let digest = AclId::parse(&format!("digest:grafana:{hash}")).unwrap();
        assert_eq!(
            (digest.scheme.as_str(), digest.id),
            ("digest", format!("grafana:{hash}"))
        );
        assert_eq!(AclId::parse("sasl:grafana").unwrap().id, "grafana");
        assert_eq!(
            AclId::parse("digest:grafana"),
            Err(BadAclId::DigestWithoutHash),
            "the user alone matches no session"
        );
        assert_eq!(
            AclId::parse("world:anyone"),
            Err(BadAclId::UnknownScheme("world".into()))
        );
        assert!(matches!(
            AclId::parse("grafana"),
            Err(BadAclId::NoScheme(_))
        ));
        assert!(matches!(AclId::parse("sasl:"), Err(BadAclId::NoScheme(_))));
    }

    #[test]
    fn connect_strings_split_into_hosts_and_chroot() {
        assert_eq!(split_connect("a:1,b:2").unwrap(), ("a:1,b:2", None));
        assert_eq!(
            split_connect("a:1,b:2/app/x").unwrap(),
            ("a:1,b:2", Some("/app/x"))
        );
        assert_eq!(split_connect("a:1/").unwrap(), ("a:1", None));
        for bad in ["/only-chroot", "a:1/x/", "a:1/x//y", ""] {
            assert!(split_connect(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn tls_files_without_pem_are_refused_with_which_one() {
        let files = |ca: &str, identity: Option<(&str, &str)>| TlsFiles {
            ca: ca.to_owned(),
            identity: identity.map(|(c, k)| (c.to_owned(), Secret::new(k.to_owned()))),
        };
        let ca_error = files("not pem", None).check().unwrap_err();
        assert!(ca_error.contains("no usable PEM certificate"), "{ca_error}");
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let pair_error = files(cert, Some(("not pem", "not pem")))
            .check()
            .unwrap_err();
        assert!(pair_error.contains("not a usable PEM pair"), "{pair_error}");
    }

    #[test]
    fn a_session_is_known_by_each_credential_it_presents_and_never_by_a_password() {
        let mut settings = ZkSettings::open("a:1", Duration::from_secs(10));
        assert_eq!(settings.identity(), None);
        settings.auth = Some(Secret::new("ops:s3cret"));
        settings.sasl = Some(SaslCredentials {
            username: "zkcron".into(),
            password: Secret::new("pw"),
        });
        // "MIIB" is no certificate, but its DER bytes are what a fingerprint is taken of.
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        settings.tls = Some(TlsFiles {
            ca: cert.into(),
            identity: Some((cert.into(), Secret::new("key"))),
        });
        let identity = settings.identity().unwrap_or_default();
        assert!(
            identity.starts_with("digest:ops, sasl:zkcron, x509:sha256:"),
            "{identity}"
        );
        assert_eq!(
            identity.len(),
            "digest:ops, sasl:zkcron, x509:sha256:".len() + 64
        );
        assert!(!identity.contains("s3cret") && !identity.contains("pw"));
    }
}
