//! What rustls is given for `rediss://` URLs: the CA to trust
//! ([`ConnectOptions::tls_ca_pem`](crate::ConnectOptions::tls_ca_pem)) and the client's
//! certificate and key ([`ConnectOptions::tls_client_pem`](crate::ConnectOptions::tls_client_pem)).
//!
//! The key is a secret: it is kept only to be handed to rustls, has no `Debug`, and a key
//! or certificate that does not parse is named in the error, never quoted (a certificate
//! passed in the key's place may be the key, and a parser's message may quote a line).

use crate::error::Error;
use redis::{ClientTlsConfig, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A client certificate chain and its private key, as PEM. No `Debug`: nothing here is
/// ever shown.
#[derive(Clone)]
pub(crate) struct ClientIdentity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

impl ClientIdentity {
    pub(crate) fn new(cert_pem: Vec<u8>, key_pem: Vec<u8>) -> ClientIdentity {
        ClientIdentity { cert_pem, key_pem }
    }
}

/// The certificates for the `redis` crate's TLS client: `ca_pem` to trust, `client` to
/// present; `None` when neither is given (the system's roots, no client certificate).
/// Checked here, so that one that does not parse is named before any connection is
/// tried.
///
/// # Errors
///
/// [`Error::is_invalid_url`] (for `url`) when the client certificate holds no PEM
/// certificate or the key is no PEM private key.
pub(crate) fn certificates(
    ca_pem: Option<&[u8]>,
    client: Option<&ClientIdentity>,
    url: &str,
) -> Result<Option<TlsCertificates>, Error> {
    if ca_pem.is_none() && client.is_none() {
        return Ok(None);
    }
    let client_tls = match client {
        None => None,
        Some(client) => {
            let certs: Result<Vec<_>, _> =
                CertificateDer::pem_slice_iter(&client.cert_pem).collect();
            if !certs.is_ok_and(|certs| !certs.is_empty()) {
                return Err(Error::invalid_url(
                    url,
                    "the client certificate is not a PEM certificate (chain)",
                ));
            }
            if PrivateKeyDer::from_pem_slice(&client.key_pem).is_err() {
                return Err(Error::invalid_url(
                    url,
                    "the client key is not a PEM private key (PKCS#8, PKCS#1 or SEC1)",
                ));
            }
            Some(ClientTlsConfig {
                client_cert: client.cert_pem.clone(),
                client_key: client.key_pem.clone(),
            })
        }
    };
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert: ca_pem.map(<[u8]>::to_vec),
    }))
}
