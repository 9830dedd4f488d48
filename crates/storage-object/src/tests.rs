//! The adapter against `object_store`'s in-memory store: key mapping, listing, the
//! conditional-write translation and the metadata of each class. The same adapter on
//! real servers is tested in `tests/`.

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{Attribute, ObjectStoreExt};
use tlogd_core::engine::objects::{
    ObjectBackend, ObjectClass, PutCondition, PutOutcome, check_conditional_writes,
};

use super::*;

fn backend(prefix: &str) -> (ObjectStoreBackend, Arc<InMemory>) {
    let mem = Arc::new(InMemory::new());
    (
        ObjectStoreBackend::single("memory", mem.clone(), prefix).unwrap(),
        mem,
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn keys_live_below_the_prefix_and_list_by_string_prefix() {
    rt().block_on(async {
        let (b, mem) = backend("/logs/one/");
        for key in [
            "checkpoint",
            "tile/0/000",
            "tile/0/000.p/5",
            "tile/0/000.p/17",
            "tile/0/001.p/3",
            ".tlogd/state",
            ".tlogd/staged/00000000000000000005-ab",
        ] {
            b.put(key, Bytes::from(key.to_string()), ObjectClass::Tile)
                .await
                .unwrap();
        }
        let stored = mem
            .get(&Path::from("logs/one/tile/0/000.p/5"))
            .await
            .unwrap();
        assert_eq!(stored.bytes().await.unwrap(), "tile/0/000.p/5");
        let mut partials = b.list("tile/0/000.p/").await.unwrap();
        partials.sort();
        assert_eq!(partials, ["tile/0/000.p/17", "tile/0/000.p/5"]);
        assert_eq!(
            b.list(".tlogd/staged/").await.unwrap(),
            [".tlogd/staged/00000000000000000005-ab"]
        );
        let mut tile0 = b.list("tile/0/00").await.unwrap();
        tile0.sort();
        assert_eq!(tile0.len(), 4, "{tile0:?}");
        assert_eq!(b.list("nothing/").await.unwrap(), Vec::<String>::new());
        assert_eq!(b.list("").await.unwrap().len(), 7);
        assert_eq!(
            b.get("tile/0/000").await.unwrap(),
            Some(Bytes::from("tile/0/000"))
        );
        assert_eq!(b.get("tile/0/002").await.unwrap(), None);
        b.delete("tile/0/000").await.unwrap();
        b.delete("tile/0/000").await.unwrap();
        assert_eq!(b.get("tile/0/000").await.unwrap(), None);
        // The root prefix works too.
        let (root, _) = backend("");
        root.put("checkpoint", Bytes::from("c"), ObjectClass::Checkpoint)
            .await
            .unwrap();
        assert_eq!(root.list("").await.unwrap(), ["checkpoint"]);
        assert_eq!(root.list("check").await.unwrap(), ["checkpoint"]);
    });
}

#[test]
fn conditional_writes_translate_both_ways() {
    rt().block_on(async {
        let (b, _) = backend("p");
        let class = ObjectClass::Private;
        let PutOutcome::Written(v1) = b
            .put_if("k", Bytes::from("1"), class, PutCondition::Absent)
            .await
            .unwrap()
        else {
            panic!("create of a new key failed");
        };
        assert!(v1.e_tag.is_some());
        assert_eq!(
            b.put_if("k", Bytes::from("2"), class, PutCondition::Absent)
                .await
                .unwrap(),
            PutOutcome::ConditionFailed
        );
        let (bytes, current) = b.get_versioned("k").await.unwrap().unwrap();
        assert_eq!((bytes, &current), (Bytes::from("1"), &v1));
        let PutOutcome::Written(v2) = b
            .put_if(
                "k",
                Bytes::from("3"),
                class,
                PutCondition::Matches(v1.clone()),
            )
            .await
            .unwrap()
        else {
            panic!("update with the current version failed");
        };
        assert_ne!(v1, v2);
        assert_eq!(
            b.put_if("k", Bytes::from("4"), class, PutCondition::Matches(v1))
                .await
                .unwrap(),
            PutOutcome::ConditionFailed
        );
        // A version of a key that does not exist fails its condition too.
        assert_eq!(
            b.put_if("gone", Bytes::from("5"), class, PutCondition::Matches(v2))
                .await
                .unwrap(),
            PutOutcome::ConditionFailed
        );
        check_conditional_writes(&b).await.unwrap();
        assert!(b.list(".tlogd/probe/").await.unwrap().is_empty());
    });
}

#[test]
fn objects_carry_the_metadata_of_their_class() {
    rt().block_on(async {
        let (b, mem) = backend("");
        b.put("checkpoint", Bytes::from("c"), ObjectClass::Checkpoint)
            .await
            .unwrap();
        b.put_if(
            "tile/0/000",
            Bytes::from("t"),
            ObjectClass::Tile,
            PutCondition::Absent,
        )
        .await
        .unwrap();
        let blob = ObjectClass::Blob {
            content_type: "application/pkix-cert",
        };
        b.put_if("issuer/ab", Bytes::from("b"), blob, PutCondition::Absent)
            .await
            .unwrap();
        for (key, class) in [
            ("checkpoint", ObjectClass::Checkpoint),
            ("tile/0/000", ObjectClass::Tile),
            ("issuer/ab", blob),
        ] {
            let got = mem.get(&Path::from(key)).await.unwrap();
            let a = &got.attributes;
            assert_eq!(
                a.get(&Attribute::ContentType).map(|v| v.as_ref()),
                Some(class.content_type())
            );
            assert_eq!(
                a.get(&Attribute::CacheControl).map(|v| v.as_ref()),
                Some(class.cache_control())
            );
        }
    });
}

#[test]
fn errors_are_one_line_and_name_the_operation_and_key() {
    rt().block_on(async {
        let (b, _) = backend("");
        // An invalid path never reaches the store.
        let e = b.get("a//b").await.unwrap_err().to_string();
        assert!(e.contains("a//b"), "{e}");
        let e = object_store::Error::Generic {
            store: "S3",
            source: "line one\n  <Error>\n  line two".into(),
        };
        let msg = b.error("put", "tile/0/000", &e).to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.contains("s3") || msg.contains("memory"), "{msg}");
        assert!(msg.contains("put tile/0/000"), "{msg}");
        assert!(ObjectStoreBackend::single("memory", Arc::new(InMemory::new()), "a/../b").is_err());
    });
}

#[test]
fn rejected_conditional_writes_are_recognised() {
    let e = object_store::Error::NotImplemented {
        operation: "put_opts with mode PutMode::Create".into(),
        implementer: "S3".into(),
    };
    assert!(conditions_unsupported(&e));
    let e = object_store::Error::Generic {
        store: "S3",
        source: "Server returned non-2xx status code: 501 Not Implemented: <Error><Code>NotImplemented</Code></Error>".into(),
    };
    assert!(conditions_unsupported(&e));
    let e = object_store::Error::Generic {
        store: "S3",
        source: "Server returned non-2xx status code: 503 Service Unavailable".into(),
    };
    assert!(!conditions_unsupported(&e));
}
