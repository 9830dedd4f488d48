//! The object-store backend on Google Cloud Storage, against the GCS XML-API emulator
//! (`tlogd-gcs-emulator`, in this process): the object-store conformance suite
//! (`tlogd_storage_object::conformance`), driven by core's engine and ObjectLog through the
//! real GCS adapter. `TLOGD_GCS_URL` points the same tests at another XML-API server
//! (Google's testbench, by hand; see the crate README) whose buckets
//! `tlogd-0`..`tlogd-255` exist.

use tlogd_storage_gcs::testsupport::TestGcs;
use tlogd_storage_object::object_conformance_tests;

object_conformance_tests!(TestGcs);
