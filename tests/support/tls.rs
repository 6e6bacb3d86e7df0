//! A throwaway PKI for the TLS tests: a CA, a server certificate for 127.0.0.1 (what a secure
//! ZooKeeper presents), a client certificate it signed, and a second CA that signed nothing the
//! servers use (the "wrong CA").
//!
//! Owns: making the keys and certificates (rcgen) and writing them as PEM into a temp dir.
//! Must not: start servers (that is `zk_cluster`).

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

pub struct TestPki {
    _dir: tempfile::TempDir,
    pub ca: PathBuf,
    /// The server's certificate followed by its key (ZooKeeper's PEM key store).
    pub server: PathBuf,
    /// The same certificate and key apart, as PEM (PostgreSQL's `server.crt`, `server.key`).
    pub server_cert: String,
    pub server_key: String,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA that signed nothing the servers use.
    pub other_ca: PathBuf,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("a CA key");
    let cert = params.self_signed(&key).expect("a CA certificate");
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    names: &[&str],
    purpose: ExtendedKeyUsagePurpose,
    issuer: &Issuer<'static, KeyPair>,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("valid names");
    params
        .distinguished_name
        .push(DnType::CommonName, "zkcron test");
    params.extended_key_usages.push(purpose);
    let key = KeyPair::generate().expect("a key");
    let cert = params
        .signed_by(&key, issuer)
        .expect("a signed certificate");
    (cert.pem(), key.serialize_pem())
}

impl TestPki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write a PEM file");
            path
        };
        let (ca_pem, issuer) = ca("zkcron test CA");
        let (server_cert, server_key) = leaf(
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &issuer,
        );
        let (client_cert, client_key) = leaf(
            &["zkcron-node"],
            ExtendedKeyUsagePurpose::ClientAuth,
            &issuer,
        );
        let (other_ca, _) = ca("another CA");
        Self {
            ca: write("ca.pem", &ca_pem),
            server: write("server.pem", &format!("{server_cert}{server_key}")),
            server_cert,
            server_key,
            client_cert: write("client.crt", &client_cert),
            client_key: write("client.key", &client_key),
            other_ca: write("other-ca.pem", &other_ca),
            _dir: dir,
        }
    }
}
