//! tlogd on Google Cloud Storage, through its XML API: the bucket's configuration and
//! credentials, over the adapter of `tlogd-storage-object` (the request mapping,
//! retries and the read cache live there).
//!
//! Conditional writes are `x-goog-if-generation-match` (`0`: the object must not
//! exist), the version is the object's generation (`x-goog-generation`).

use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};

pub use tlogd_storage_object::{ClientTuning, ObjectStoreBackend, SetupError};

#[cfg(feature = "testsupport")]
pub mod testsupport;

/// Where and how to reach the bucket. Credentials not given here come from the
/// standard Google chain as `object_store` reads it: `GOOGLE_SERVICE_ACCOUNT` (a key
/// file), `GOOGLE_SERVICE_ACCOUNT_KEY` (its JSON), `GOOGLE_APPLICATION_CREDENTIALS`,
/// gcloud's application default credentials, then the GCE metadata server (never when
/// `NO_GCE_CHECK` is `true`).
#[derive(Clone, Debug, Default)]
pub struct GcsOptions {
    /// The bucket (it must exist).
    pub bucket: String,
    /// Key prefix inside the bucket (`""`: the root).
    pub prefix: String,
    /// A service account key file; overrides the environment. Emulators are reached
    /// with a key whose JSON has `"gcs_base_url"` and `"disable_oauth": true`.
    pub service_account_path: Option<String>,
    /// A service account key's JSON; overrides the environment.
    pub service_account_key: Option<String>,
    /// Another endpoint than `https://storage.googleapis.com` (an emulator).
    pub endpoint: Option<String>,
    /// Send requests without credentials (an emulator, or a test server).
    pub anonymous: bool,
    /// Allow `http://` endpoints (only for a store on a trusted network).
    pub allow_http: bool,
    /// HTTP timeouts, pool and retries.
    pub client: ClientTuning,
}

/// The backend for `opts`: its plain and conditional clients (see `tlogd-storage-object`
/// on why conditional writes get a client that never retries).
pub fn backend(opts: &GcsOptions) -> Result<ObjectStoreBackend, SetupError> {
    tlogd_storage_object::install_tls_provider();
    tlogd_storage_object::check_bucket_and_endpoint(
        "GCS",
        &opts.bucket,
        opts.endpoint.as_deref(),
        opts.allow_http,
    )?;
    let mut b = GoogleCloudStorageBuilder::from_env().with_bucket_name(&opts.bucket);
    if let Some(p) = &opts.service_account_path {
        b = b.with_service_account_path(p);
    }
    if let Some(k) = &opts.service_account_key {
        b = b.with_service_account_key(k);
    }
    if let Some(e) = &opts.endpoint {
        b = b.with_base_url(e.trim_end_matches('/'));
    }
    if opts.anonymous {
        b = b.with_skip_signature(true);
    }
    refuse_metadata_server(&b)?;
    tlogd_storage_object::backend_with_two_clients("gcs", &opts.client, &opts.prefix, |retry| {
        b.clone()
            .with_client_options(opts.client.client_options(opts.allow_http))
            .with_retry(retry)
            .build()
    })
}

/// With no credentials from settings, environment or gcloud, the builder falls back to
/// the GCE metadata server. Honour `NO_GCE_CHECK=true` (as Google's libraries do) and
/// `AWS_EC2_METADATA_DISABLED=true` (which tests set for every cloud): fail with a
/// clear message instead.
fn refuse_metadata_server(b: &GoogleCloudStorageBuilder) -> Result<(), SetupError> {
    let set = |var: &str| std::env::var(var).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !set("NO_GCE_CHECK") && !set("AWS_EC2_METADATA_DISABLED") {
        return Ok(());
    }
    let has = |k: GoogleConfigKey| b.get_config_value(&k).is_some_and(|v| !v.is_empty());
    let gcloud_adc = std::env::var_os("HOME").is_some_and(|h| {
        std::path::Path::new(&h)
            .join(".config/gcloud/application_default_credentials.json")
            .exists()
    });
    let credentials = has(GoogleConfigKey::ServiceAccount)
        || has(GoogleConfigKey::ServiceAccountKey)
        || has(GoogleConfigKey::ApplicationCredentials)
        || has(GoogleConfigKey::BearerToken)
        || b.get_config_value(&GoogleConfigKey::SkipSignature)
            .is_some_and(|v| v == "true")
        || gcloud_adc;
    if credentials {
        return Ok(());
    }
    Err(SetupError::Config(
        "no GCS credentials (set GOOGLE_SERVICE_ACCOUNT or GOOGLE_APPLICATION_CREDENTIALS, or \
         configure a service account), and NO_GCE_CHECK / AWS_EC2_METADATA_DISABLED forbid \
         asking the metadata server"
            .into(),
    ))
}
