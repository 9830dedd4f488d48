//! tlogd on Amazon S3 and S3-compatible stores (MinIO, Cloudflare R2, ...): the bucket's
//! configuration and credentials, over the adapter of `tlogd-storage-object` (the
//! request mapping, retries and the read cache live there).
//!
//! Conditional writes are S3's `If-None-Match: *` and `If-Match: <etag>` on `PUT`
//! (AWS since November 2024; MinIO, R2). `object_store` 0.14 sends them by default
//! (`S3ConditionalPut::ETagMatch`); a store that ignores them is refused when the log
//! is opened.

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};

pub use tlogd_storage_object::{ClientTuning, ObjectStoreBackend, SetupError};

#[cfg(feature = "testsupport")]
pub mod testsupport;

/// Where and how to reach the bucket. Credentials not given here come from the
/// standard AWS chain as `object_store` reads it: `AWS_ACCESS_KEY_ID` /
/// `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`, web identity
/// (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`), ECS/EKS container credentials,
/// then the EC2 instance metadata service (never when `AWS_EC2_METADATA_DISABLED` is
/// `true`).
#[derive(Clone, Debug, Default)]
pub struct S3Options {
    /// The bucket (it must exist).
    pub bucket: String,
    /// Key prefix inside the bucket (`""`: the root).
    pub prefix: String,
    /// The region; default `AWS_REGION` / `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// A non-AWS endpoint, e.g. `http://127.0.0.1:9000` for MinIO; default AWS.
    pub endpoint: Option<String>,
    /// Allow `http://` endpoints (only for a store on a trusted network).
    pub allow_http: bool,
    /// Access key id; overrides the environment.
    pub access_key_id: Option<String>,
    /// Secret access key; overrides the environment.
    pub secret_access_key: Option<String>,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
    /// `https://<bucket>.<endpoint>` requests instead of `https://<endpoint>/<bucket>`;
    /// default: virtual-hosted on AWS, path style on a custom endpoint.
    pub virtual_hosted_style: Option<bool>,
    /// HTTP timeouts, pool and retries.
    pub client: ClientTuning,
}

/// The backend for `opts`: its plain and conditional clients (see `tlogd-storage-object`
/// on why conditional writes get a client that never retries).
pub fn backend(opts: &S3Options) -> Result<ObjectStoreBackend, SetupError> {
    tlogd_storage_object::install_tls_provider();
    tlogd_storage_object::check_bucket_and_endpoint(
        "S3",
        &opts.bucket,
        opts.endpoint.as_deref(),
        opts.allow_http,
    )?;
    let mut b = AmazonS3Builder::from_env().with_bucket_name(&opts.bucket);
    if let Some(r) = &opts.region {
        b = b.with_region(r);
    }
    if let Some(e) = &opts.endpoint {
        b = b.with_endpoint(e);
    }
    if let Some(v) = opts.virtual_hosted_style {
        b = b.with_virtual_hosted_style_request(v);
    }
    if let Some(k) = &opts.access_key_id {
        b = b.with_access_key_id(k);
    }
    if let Some(k) = &opts.secret_access_key {
        b = b.with_secret_access_key(k);
    }
    if let Some(t) = &opts.session_token {
        b = b.with_token(t);
    }
    refuse_metadata_service(&b)?;
    tlogd_storage_object::backend_with_two_clients("s3", &opts.client, &opts.prefix, |retry| {
        b.clone()
            .with_client_options(opts.client.client_options(opts.allow_http))
            .with_retry(retry)
            .build()
    })
}

/// With no credentials from settings, environment, web identity or container, the
/// builder falls back to the EC2 instance metadata service (169.254.169.254). Honour
/// `AWS_EC2_METADATA_DISABLED=true` (as the AWS SDKs do, and as tests set it): fail
/// with a clear message instead.
fn refuse_metadata_service(b: &AmazonS3Builder) -> Result<(), SetupError> {
    let disabled = std::env::var("AWS_EC2_METADATA_DISABLED")
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !disabled {
        return Ok(());
    }
    let has = |k: AmazonS3ConfigKey| b.get_config_value(&k).is_some_and(|v| !v.is_empty());
    let credentials = has(AmazonS3ConfigKey::AccessKeyId)
        || (has(AmazonS3ConfigKey::WebIdentityTokenFile) && has(AmazonS3ConfigKey::RoleArn))
        || has(AmazonS3ConfigKey::ContainerCredentialsRelativeUri)
        || has(AmazonS3ConfigKey::ContainerCredentialsFullUri)
        || b.get_config_value(&AmazonS3ConfigKey::SkipSignature)
            .is_some_and(|v| v == "true");
    if credentials {
        return Ok(());
    }
    Err(SetupError::Config(
        "no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or configure \
         them), and AWS_EC2_METADATA_DISABLED forbids asking the instance metadata service"
            .into(),
    ))
}
