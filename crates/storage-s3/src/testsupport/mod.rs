//! Test servers for the S3 backend (feature `testsupport`): a private MinIO
//! ([`minio::TestMinio`]) and the SigV4 signing its set-up requests need.

pub mod minio;
pub mod sigv4;
