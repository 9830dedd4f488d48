//! The object-store backend on S3, against a private MinIO server (feature
//! `testsupport`): the object-store conformance suite (`tlogd_storage_object::conformance`),
//! driven by core's engine and ObjectLog through the real S3 adapter.

use tlogd_storage_object::object_conformance_tests;
use tlogd_storage_s3::testsupport::minio::TestMinio;

object_conformance_tests!(TestMinio);
