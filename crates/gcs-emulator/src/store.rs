//! The buckets and the XML API's semantics on them: objects with generations,
//! preconditions, ranges, listings, copies and multipart uploads, and GCS-style XML errors.
//!
//! Everything here is synchronous and runs under the one store lock, which is what makes
//! each request atomic with respect to every other.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use hyper::header::{
    CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_ENCODING, CONTENT_LANGUAGE, CONTENT_LENGTH,
    CONTENT_RANGE, CONTENT_TYPE, ETAG, HeaderMap, HeaderName, HeaderValue, IF_MATCH,
    IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_UNMODIFIED_SINCE, LAST_MODIFIED, RANGE,
};
use hyper::{Method, Response, StatusCode, Uri};
use md5::{Digest, Md5};
use percent_encoding::percent_decode_str;

use crate::StoredObject;

const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";
const GENERATION_MATCH: &str = "x-goog-if-generation-match";
const METAGENERATION_MATCH: &str = "x-goog-if-metageneration-match";
const STORAGE_CLASS: &str = "x-goog-storage-class";

/// A request's bucket, object key and query, decoded from its path-style URL.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) bucket: String,
    /// `None` for the bucket itself (a listing).
    pub(crate) key: Option<String>,
    query: Vec<(String, String)>,
}

impl Target {
    pub(crate) fn parse(uri: &Uri) -> Self {
        let path = uri.path().strip_prefix('/').unwrap_or(uri.path());
        // Clients percent-encode the key whole ('/' as %2F), so the first raw '/' ends the
        // bucket; keys with a raw '/' (curl, gsutil) work the same after decoding.
        let (bucket, key) = match path.split_once('/') {
            Some((b, k)) if !k.is_empty() => (b, Some(k)),
            Some((b, _)) => (b, None),
            None => (path, None),
        };
        let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
        Self {
            bucket: decode(bucket),
            key: key.map(decode),
            query: form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .into_owned()
                .collect(),
        }
    }

    pub(crate) fn query(&self, name: &str) -> Option<String> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    fn has_query(&self, name: &str) -> bool {
        self.query.iter().any(|(k, _)| k == name)
    }
}

/// One live object.
#[derive(Clone, Debug)]
struct Object {
    data: Bytes,
    generation: i64,
    metageneration: i64,
    updated: SystemTime,
    md5: [u8; 16],
    crc32c: u32,
    content_type: String,
    /// The content headers and custom metadata given at upload, returned on reads.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Object {
    fn etag(&self) -> String {
        format!("\"{}\"", hex(&self.md5))
    }

    /// The headers GCS puts on every response about an object.
    fn describe(&self, h: &mut HeaderMap) {
        h.insert(ETAG, value(self.etag()));
        h.insert(LAST_MODIFIED, value(httpdate::fmt_http_date(self.updated)));
        h.insert("x-goog-generation", HeaderValue::from(self.generation));
        h.insert(
            "x-goog-metageneration",
            HeaderValue::from(self.metageneration),
        );
        h.insert(
            "x-goog-hash",
            value(format!(
                "crc32c={},md5={}",
                STANDARD.encode(self.crc32c.to_be_bytes()),
                STANDARD.encode(self.md5)
            )),
        );
        h.insert(
            "x-goog-stored-content-length",
            HeaderValue::from(self.data.len()),
        );
        let encoding = self
            .headers
            .iter()
            .find(|(k, _)| k == CONTENT_ENCODING)
            .map(|(_, v)| v.clone())
            .unwrap_or(HeaderValue::from_static("identity"));
        h.insert("x-goog-stored-content-encoding", encoding);
    }

    fn stored(&self) -> StoredObject {
        StoredObject {
            data: self.data.clone(),
            generation: self.generation,
            metageneration: self.metageneration,
            content_type: self.content_type.clone(),
        }
    }
}

/// A multipart upload in progress.
#[derive(Debug)]
struct Upload {
    bucket: String,
    key: String,
    content_type: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Part number to (data, MD5).
    parts: BTreeMap<u32, (Bytes, [u8; 16])>,
}

/// All buckets, plus the generation clock and the multipart uploads.
#[derive(Debug)]
pub(crate) struct Store {
    buckets: HashMap<String, BTreeMap<String, Object>>,
    last_generation: i64,
    uploads: HashMap<String, Upload>,
    next_upload: u64,
}

impl Store {
    pub(crate) fn new(buckets: &[&str]) -> Self {
        Self {
            buckets: buckets
                .iter()
                .map(|b| ((*b).to_owned(), BTreeMap::new()))
                .collect(),
            last_generation: 0,
            uploads: HashMap::new(),
            next_upload: 1,
        }
    }

    pub(crate) fn stored(&self, bucket: &str, key: &str) -> Option<StoredObject> {
        self.buckets.get(bucket)?.get(key).map(Object::stored)
    }

    /// GCS generations are microsecond timestamps, unique and increasing per object; one
    /// store-wide increasing clock gives that, and never reuses a generation after a delete
    /// (so a stale conditional update can never match a re-created object).
    fn next_generation(&mut self) -> i64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros();
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        self.last_generation = now.max(self.last_generation + 1);
        self.last_generation
    }

    fn new_object(
        &mut self,
        data: Bytes,
        content_type: String,
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Object {
        let md5 = Md5::digest(&data).into();
        Object {
            crc32c: crc32c(&data),
            data,
            generation: self.next_generation(),
            metageneration: 1,
            updated: SystemTime::now(),
            md5,
            content_type,
            headers,
        }
    }

    /// Handles one request.
    pub(crate) fn apply(
        &mut self,
        method: &Method,
        headers: &HeaderMap,
        target: &Target,
        body: Bytes,
        page_size: usize,
    ) -> Response<Bytes> {
        if !self.buckets.contains_key(&target.bucket) {
            return error_response(
                StatusCode::NOT_FOUND,
                "NoSuchBucket",
                "The specified bucket does not exist.",
            );
        }
        let Some(key) = target.key.as_deref() else {
            return match *method {
                Method::GET => self.list(target, page_size),
                _ => not_implemented(),
            };
        };
        let upload_id = target.query("uploadId");
        match (method, upload_id) {
            (&Method::GET, None) => self.read(false, headers, target, key),
            (&Method::HEAD, None) => self.read(true, headers, target, key),
            (&Method::PUT, None) if headers.contains_key("x-goog-copy-source") => {
                self.copy(headers, &target.bucket, key)
            }
            (&Method::PUT, None) => self.put(headers, &target.bucket, key, body),
            (&Method::DELETE, None) => self.delete(headers, &target.bucket, key),
            (&Method::POST, None) if target.has_query("uploads") => {
                self.initiate(headers, &target.bucket, key)
            }
            (&Method::PUT, Some(id)) => self.put_part(&id, target, body),
            (&Method::POST, Some(id)) => self.complete(&id, &body),
            (&Method::DELETE, Some(id)) => match self.uploads.remove(&id) {
                Some(_) => empty(StatusCode::NO_CONTENT),
                None => no_such_upload(),
            },
            _ => not_implemented(),
        }
    }

    fn put(
        &mut self,
        headers: &HeaderMap,
        bucket: &str,
        key: &str,
        body: Bytes,
    ) -> Response<Bytes> {
        let live = self.buckets.get(bucket).and_then(|b| b.get(key));
        if let Err(reject) = write_preconditions(headers, live) {
            return reject.response();
        }
        if let Some(want) = headers.get("content-md5") {
            let got = STANDARD.encode(Md5::digest(&body));
            if want.as_bytes() != got.as_bytes() {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "BadDigest",
                    "The Content-MD5 you specified did not match what we received.",
                );
            }
        }
        let (content_type, stored) = content_headers(headers);
        let object = self.new_object(body, content_type, stored);
        let mut resp = empty(StatusCode::OK);
        object.describe(resp.headers_mut());
        self.insert(bucket, key, object);
        resp
    }

    fn insert(&mut self, bucket: &str, key: &str, object: Object) {
        if let Some(b) = self.buckets.get_mut(bucket) {
            b.insert(key.to_owned(), object);
        }
    }

    fn read(&self, head: bool, headers: &HeaderMap, target: &Target, key: &str) -> Response<Bytes> {
        let Some(object) = self.buckets.get(&target.bucket).and_then(|b| b.get(key)) else {
            return no_such_key();
        };
        // Only the live generation is kept: asking for any other one finds nothing.
        if let Some(g) = target.query("generation")
            && g.parse::<i64>().ok() != Some(object.generation)
        {
            return no_such_key();
        }
        if let Err(reject) = write_preconditions(headers, Some(object)) {
            return reject.response();
        }
        if let Err(status) = read_conditions(headers, object) {
            let mut resp = if status == StatusCode::NOT_MODIFIED {
                empty(status)
            } else {
                precondition_failed()
            };
            object.describe(resp.headers_mut());
            return resp;
        }
        let size = object.data.len() as u64;
        let range = match headers.get(RANGE).and_then(|r| parse_range(r, size)) {
            None => None,
            Some(Ok(range)) => Some(range),
            Some(Err(())) => {
                let mut resp = error_response(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "InvalidRange",
                    "The requested range cannot be satisfied.",
                );
                resp.headers_mut()
                    .insert(CONTENT_RANGE, value(format!("bytes */{size}")));
                return resp;
            }
        };
        let mut resp = Response::new(Bytes::new());
        let data = match range {
            None => object.data.clone(),
            Some((start, end)) => {
                *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
                resp.headers_mut().insert(
                    CONTENT_RANGE,
                    value(format!("bytes {start}-{}/{size}", end - 1)),
                );
                // Both ends are within the object, which is in memory: they fit a usize.
                object.data.slice(start as usize..end as usize)
            }
        };
        let h = resp.headers_mut();
        object.describe(h);
        h.insert(CONTENT_TYPE, value(object.content_type.clone()));
        // GCS names the storage class on every read; an upload's own choice overrides below.
        h.insert(STORAGE_CLASS, HeaderValue::from_static("STANDARD"));
        for (k, v) in &object.headers {
            h.insert(k.clone(), v.clone());
        }
        // Set explicitly so that HEAD tells the length it would send.
        h.insert(CONTENT_LENGTH, HeaderValue::from(data.len()));
        if !head {
            *resp.body_mut() = data;
        }
        resp
    }

    fn delete(&mut self, headers: &HeaderMap, bucket: &str, key: &str) -> Response<Bytes> {
        let Some(objects) = self.buckets.get_mut(bucket) else {
            return no_such_key();
        };
        let Some(live) = objects.get(key) else {
            return no_such_key();
        };
        if let Err(reject) = write_preconditions(headers, Some(live)) {
            return reject.response();
        }
        objects.remove(key);
        empty(StatusCode::NO_CONTENT)
    }

    fn copy(&mut self, headers: &HeaderMap, bucket: &str, key: &str) -> Response<Bytes> {
        let source = headers
            .get("x-goog-copy-source")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let source = source.strip_prefix('/').unwrap_or(source);
        let Some((src_bucket, src_key)) = source.split_once('/') else {
            return error_response(
                StatusCode::BAD_REQUEST,
                "InvalidArgument",
                "x-goog-copy-source must be bucket/object.",
            );
        };
        let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
        let Some(src_objects) = self.buckets.get(&decode(src_bucket)) else {
            return error_response(
                StatusCode::NOT_FOUND,
                "NoSuchBucket",
                "The specified bucket does not exist.",
            );
        };
        let Some(src) = src_objects.get(&decode(src_key)).cloned() else {
            return no_such_key();
        };
        let live = self.buckets.get(bucket).and_then(|b| b.get(key));
        if let Err(reject) = write_preconditions(headers, live) {
            return reject.response();
        }
        // The default metadata directive is COPY: the source's content headers come along.
        let object = self.new_object(src.data, src.content_type, src.headers);
        let body = format!(
            "<?xml version='1.0' encoding='UTF-8'?><CopyObjectResult><LastModified>{}</LastModified><ETag>{}</ETag></CopyObjectResult>",
            rfc3339(object.updated),
            object.etag()
        );
        let mut resp = xml_response(StatusCode::OK, body);
        object.describe(resp.headers_mut());
        self.insert(bucket, key, object);
        resp
    }

    fn list(&self, target: &Target, page_size: usize) -> Response<Bytes> {
        let Some(objects) = self.buckets.get(&target.bucket) else {
            return no_such_key();
        };
        let prefix = target.query("prefix").unwrap_or_default();
        let delimiter = target.query("delimiter").filter(|d| !d.is_empty());
        let max_keys = match target.query("max-keys").map(|m| m.parse::<usize>()) {
            None => page_size,
            Some(Ok(m)) => m.clamp(1, page_size),
            Some(Err(_)) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    "max-keys must be a number.",
                );
            }
        };
        // Where this page starts: after start-after, and after the last entry of the
        // previous page (a key, or a common prefix whose keys are all skipped).
        let start_after = target.query("start-after").unwrap_or_default();
        let token = target.query("continuation-token");
        let resume = match token.as_deref().map(decode_token) {
            None => None,
            Some(Some(r)) => Some(r),
            Some(None) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    "Invalid continuation token.",
                );
            }
        };
        let mut from = prefix.clone();
        for after in [Some(&start_after), resume.as_ref().map(|r| &r.after)]
            .into_iter()
            .flatten()
        {
            if *after > from {
                from.clone_from(after);
            }
        }

        let mut contents = String::new();
        let mut prefixes = String::new();
        let mut entries = 0;
        let mut last: Option<Resume> = None;
        let mut truncated = false;
        for (key, object) in
            objects.range::<str, _>((Bound::Included(from.as_str()), Bound::Unbounded))
        {
            if !key.starts_with(&prefix) {
                break;
            }
            if *key <= start_after
                || resume
                    .as_ref()
                    .is_some_and(|r| *key <= r.after || (r.is_prefix && key.starts_with(&r.after)))
            {
                continue;
            }
            let common = delimiter.as_ref().and_then(|d| {
                key[prefix.len()..]
                    .find(d.as_str())
                    .map(|i| key[..prefix.len() + i + d.len()].to_owned())
            });
            if let (Some(cp), Some(l)) = (&common, &last)
                && l.is_prefix
                && *cp == l.after
            {
                continue;
            }
            if entries == max_keys {
                truncated = true;
                break;
            }
            entries += 1;
            match common {
                Some(cp) => {
                    prefixes.push_str(&format!(
                        "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>",
                        escape(&cp)
                    ));
                    last = Some(Resume {
                        after: cp,
                        is_prefix: true,
                    });
                }
                None => {
                    contents.push_str(&format!(
                        "<Contents><Key>{}</Key><Generation>{}</Generation><MetaGeneration>{}</MetaGeneration><LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size></Contents>",
                        escape(key),
                        object.generation,
                        object.metageneration,
                        rfc3339(object.updated),
                        object.etag(),
                        object.data.len()
                    ));
                    last = Some(Resume {
                        after: key.clone(),
                        is_prefix: false,
                    });
                }
            }
        }
        let mut body = format!(
            "<?xml version='1.0' encoding='UTF-8'?><ListBucketResult xmlns=\"http://doc.s3.amazonaws.com/2006-03-01\"><Name>{}</Name><Prefix>{}</Prefix>",
            escape(&target.bucket),
            escape(&prefix)
        );
        if let Some(d) = &delimiter {
            body.push_str(&format!("<Delimiter>{}</Delimiter>", escape(d)));
        }
        if let Some(t) = &token {
            body.push_str(&format!(
                "<ContinuationToken>{}</ContinuationToken>",
                escape(t)
            ));
        }
        body.push_str(&format!(
            "<KeyCount>{entries}</KeyCount><MaxKeys>{max_keys}</MaxKeys><IsTruncated>{truncated}</IsTruncated>"
        ));
        body.push_str(&contents);
        body.push_str(&prefixes);
        if let (true, Some(l)) = (truncated, &last) {
            body.push_str(&format!(
                "<NextContinuationToken>{}</NextContinuationToken>",
                encode_token(l)
            ));
        }
        body.push_str("</ListBucketResult>");
        xml_response(StatusCode::OK, body)
    }

    fn initiate(&mut self, headers: &HeaderMap, bucket: &str, key: &str) -> Response<Bytes> {
        let id = format!("emulator-upload-{}", self.next_upload);
        self.next_upload += 1;
        let (content_type, stored) = content_headers(headers);
        self.uploads.insert(
            id.clone(),
            Upload {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                content_type,
                headers: stored,
                parts: BTreeMap::new(),
            },
        );
        xml_response(
            StatusCode::OK,
            format!(
                "<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key><UploadId>{}</UploadId></InitiateMultipartUploadResult>",
                escape(bucket),
                escape(key),
                escape(&id)
            ),
        )
    }

    fn put_part(&mut self, id: &str, target: &Target, body: Bytes) -> Response<Bytes> {
        let Some(upload) = self.uploads.get_mut(id) else {
            return no_such_upload();
        };
        let Some(number) = target
            .query("partNumber")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| (1..=10_000).contains(n))
        else {
            return error_response(
                StatusCode::BAD_REQUEST,
                "InvalidArgument",
                "partNumber must be between 1 and 10000.",
            );
        };
        let md5: [u8; 16] = Md5::digest(&body).into();
        upload.parts.insert(number, (body, md5));
        let mut resp = empty(StatusCode::OK);
        resp.headers_mut()
            .insert(ETAG, value(format!("\"{}\"", hex(&md5))));
        resp
    }

    fn complete(&mut self, id: &str, body: &[u8]) -> Response<Bytes> {
        let Some(upload) = self.uploads.get(id) else {
            return no_such_upload();
        };
        let listed = match parse_complete(body) {
            Some(parts) if !parts.is_empty() => parts,
            _ => return malformed_xml(),
        };
        let mut data = Vec::new();
        let mut previous = 0;
        for (number, etag) in &listed {
            if *number <= previous {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "InvalidPartOrder",
                    "The list of parts was not in ascending order.",
                );
            }
            previous = *number;
            match upload.parts.get(number) {
                Some((part, md5)) if etag.trim_matches('"') == hex(md5) => {
                    data.extend_from_slice(part)
                }
                _ => {
                    return error_response(
                        StatusCode::BAD_REQUEST,
                        "InvalidPart",
                        "One or more of the specified parts could not be found.",
                    );
                }
            }
        }
        let Some(upload) = self.uploads.remove(id) else {
            return no_such_upload();
        };
        let object = self.new_object(Bytes::from(data), upload.content_type, upload.headers);
        let mut resp = xml_response(
            StatusCode::OK,
            format!(
                "<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></CompleteMultipartUploadResult>",
                escape(&upload.bucket),
                escape(&upload.key),
                object.etag()
            ),
        );
        object.describe(resp.headers_mut());
        self.insert(&upload.bucket, &upload.key, object);
        resp
    }
}

/// Where a listing resumes: after this key, or after every key under this common prefix.
struct Resume {
    after: String,
    is_prefix: bool,
}

fn encode_token(r: &Resume) -> String {
    let tagged = format!("{}{}", if r.is_prefix { 'p' } else { 'k' }, r.after);
    URL_SAFE_NO_PAD.encode(tagged)
}

fn decode_token(t: &str) -> Option<Resume> {
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(t).ok()?).ok()?;
    let (tag, after) = raw.split_at_checked(1)?;
    Some(Resume {
        after: after.to_owned(),
        is_prefix: match tag {
            "p" => true,
            "k" => false,
            _ => return None,
        },
    })
}

/// Why a request's GCS preconditions rejected it.
enum Reject {
    /// The header named is not a number.
    Invalid(&'static str),
    /// The condition does not hold.
    Failed,
}

impl Reject {
    fn response(self) -> Response<Bytes> {
        match self {
            Reject::Invalid(name) => error_response(
                StatusCode::BAD_REQUEST,
                "InvalidArgument",
                &format!("Invalid value for {name}."),
            ),
            Reject::Failed => precondition_failed(),
        }
    }
}

/// `x-goog-if-generation-match` and `x-goog-if-metageneration-match` against the live
/// object (`None`: absent; generation 0 means "absent").
fn write_preconditions(headers: &HeaderMap, live: Option<&Object>) -> Result<(), Reject> {
    for (name, actual) in [
        (GENERATION_MATCH, live.map(|o| o.generation)),
        (METAGENERATION_MATCH, live.map(|o| o.metageneration)),
    ] {
        let Some(want) = headers.get(name) else {
            continue;
        };
        let Some(want) = want
            .to_str()
            .ok()
            .and_then(|w| w.trim().parse::<i64>().ok())
        else {
            return Err(Reject::Invalid(name));
        };
        if want != actual.unwrap_or(0) {
            return Err(Reject::Failed);
        }
    }
    Ok(())
}

/// HTTP's conditional read headers, in RFC 9110's order of evaluation. `Err` carries 412 or
/// 304.
fn read_conditions(headers: &HeaderMap, object: &Object) -> Result<(), StatusCode> {
    let etag = object.etag();
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let date = |name| header(name).and_then(|v| httpdate::parse_http_date(v).ok());
    // HTTP dates have whole seconds.
    let updated = object
        .updated
        .duration_since(UNIX_EPOCH)
        .map(|d| UNIX_EPOCH + Duration::from_secs(d.as_secs()))
        .unwrap_or(UNIX_EPOCH);
    if let Some(m) = header(IF_MATCH) {
        if !etag_matches(m, &etag) {
            return Err(StatusCode::PRECONDITION_FAILED);
        }
    } else if let Some(since) = date(IF_UNMODIFIED_SINCE)
        && updated > since
    {
        return Err(StatusCode::PRECONDITION_FAILED);
    }
    if let Some(m) = header(IF_NONE_MATCH) {
        if etag_matches(m, &etag) {
            return Err(StatusCode::NOT_MODIFIED);
        }
    } else if let Some(since) = date(IF_MODIFIED_SINCE)
        && updated <= since
    {
        return Err(StatusCode::NOT_MODIFIED);
    }
    Ok(())
}

fn etag_matches(list: &str, etag: &str) -> bool {
    let bare = etag.trim_matches('"');
    list.split(',').map(str::trim).any(|candidate| {
        let candidate = candidate.strip_prefix("W/").unwrap_or(candidate);
        candidate == "*" || candidate.trim_matches('"') == bare
    })
}

/// A `Range: bytes=...` header against an object of `size` bytes: `None` to ignore it (not a
/// single byte range, as HTTP allows), `Err` if unsatisfiable, else the half-open range.
fn parse_range(header: &HeaderValue, size: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = header.to_str().ok()?.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        let suffix: u64 = last.parse().ok()?;
        if suffix == 0 || size == 0 {
            return Some(Err(()));
        }
        return Some(Ok((size.saturating_sub(suffix), size)));
    }
    let start: u64 = first.parse().ok()?;
    let end = match last {
        "" => size,
        l => {
            let l: u64 = l.parse().ok()?;
            if l < start {
                return None;
            }
            l.saturating_add(1).min(size)
        }
    };
    if start >= size {
        return Some(Err(()));
    }
    Some(Ok((start, end)))
}

/// The Content-Type and the other headers of an upload that are stored with the object.
fn content_headers(headers: &HeaderMap) -> (String, Vec<(HeaderName, HeaderValue)>) {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(DEFAULT_CONTENT_TYPE)
        .to_owned();
    let kept = headers
        .iter()
        .filter(|(k, _)| {
            [
                CACHE_CONTROL,
                CONTENT_DISPOSITION,
                CONTENT_ENCODING,
                CONTENT_LANGUAGE,
            ]
            .contains(k)
                || k.as_str() == STORAGE_CLASS
                || k.as_str().starts_with("x-goog-meta-")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (content_type, kept)
}

/// The `(PartNumber, ETag)` pairs of a CompleteMultipartUpload document. A full XML parser
/// would be overkill: the document is flat and comes from a client, not from users.
fn parse_complete(body: &[u8]) -> Option<Vec<(u32, String)>> {
    let text = std::str::from_utf8(body).ok()?;
    let element = |part: &str, name: &str| -> Option<String> {
        let open = format!("<{name}>");
        let start = part.find(&open)? + open.len();
        let end = start + part[start..].find(&format!("</{name}>"))?;
        Some(unescape(&part[start..end]))
    };
    text.split("<Part>")
        .skip(1)
        .map(|part| {
            Some((
                element(part, "PartNumber")?.trim().parse().ok()?,
                element(part, "ETag")?,
            ))
        })
        .collect()
}

fn empty(status: StatusCode) -> Response<Bytes> {
    let mut resp = Response::new(Bytes::new());
    *resp.status_mut() = status;
    resp
}

fn xml_response(status: StatusCode, body: String) -> Response<Bytes> {
    let mut resp = Response::new(Bytes::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/xml; charset=UTF-8"),
    );
    resp
}

/// A GCS-style XML error document.
pub(crate) fn error_response(status: StatusCode, code: &str, message: &str) -> Response<Bytes> {
    xml_response(
        status,
        format!(
            "<?xml version='1.0' encoding='UTF-8'?><Error><Code>{}</Code><Message>{}</Message></Error>",
            escape(code),
            escape(message)
        ),
    )
}

fn no_such_key() -> Response<Bytes> {
    error_response(
        StatusCode::NOT_FOUND,
        "NoSuchKey",
        "The specified key does not exist.",
    )
}

fn no_such_upload() -> Response<Bytes> {
    error_response(
        StatusCode::NOT_FOUND,
        "NoSuchUpload",
        "The requested upload was not found.",
    )
}

fn precondition_failed() -> Response<Bytes> {
    error_response(
        StatusCode::PRECONDITION_FAILED,
        "PreconditionFailed",
        "At least one of the pre-conditions you specified did not hold.",
    )
}

fn malformed_xml() -> Response<Bytes> {
    error_response(
        StatusCode::BAD_REQUEST,
        "MalformedXML",
        "The XML you provided was not well-formed.",
    )
}

fn not_implemented() -> Response<Bytes> {
    error_response(
        StatusCode::NOT_IMPLEMENTED,
        "NotImplemented",
        "The emulator does not implement this request.",
    )
}

/// A header value from text the emulator made itself (always visible ASCII); the empty
/// fallback cannot happen but spares a panic path.
fn value(s: String) -> HeaderValue {
    HeaderValue::try_from(s).unwrap_or(HeaderValue::from_static(""))
}

/// CRC-32C (Castagnoli), which GCS reports in `x-goog-hash` beside the MD5.
fn crc32c(data: &[u8]) -> u32 {
    static TABLE: OnceLock<[u32; 256]> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (i, entry) in table.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
            }
            *entry = c;
        }
        table
    });
    !data.iter().fold(!0u32, |crc, &b| {
        table[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// RFC 3339 UTC with milliseconds, always (".000" too), as GCS writes `LastModified`
/// in listings.
fn rfc3339(t: SystemTime) -> String {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let (y, m, d, h, mi, s, f) = tlogd_core::time::utc_fields(ms);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{f:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_199_123); // leap year, Feb 29
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.123Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn ranges() {
        let r = |s: &str, size| parse_range(&HeaderValue::from_str(s).unwrap(), size);
        assert_eq!(r("bytes=0-9", 100), Some(Ok((0, 10))));
        assert_eq!(r("bytes=90-200", 100), Some(Ok((90, 100))));
        assert_eq!(r("bytes=10-", 100), Some(Ok((10, 100))));
        assert_eq!(r("bytes=-10", 100), Some(Ok((90, 100))));
        assert_eq!(r("bytes=-200", 100), Some(Ok((0, 100))));
        assert_eq!(r("bytes=100-", 100), Some(Err(())));
        assert_eq!(r("bytes=0-0", 0), Some(Err(())));
        assert_eq!(r("bytes=5-2", 100), None);
        assert_eq!(r("bytes=0-1,5-6", 100), None);
        assert_eq!(r("items=0-1", 100), None);
    }

    #[test]
    fn tokens_round_trip() {
        for (after, is_prefix) in [("a/b", false), ("dir/", true), ("", false)] {
            let t = encode_token(&Resume {
                after: after.into(),
                is_prefix,
            });
            let r = decode_token(&t).unwrap();
            assert_eq!((r.after.as_str(), r.is_prefix), (after, is_prefix));
        }
        assert!(decode_token("!!").is_none());
    }

    #[test]
    fn complete_document() {
        let doc = br#"<CompleteMultipartUpload><Part><ETag>"abc"</ETag><PartNumber>1</PartNumber></Part><Part><PartNumber>2</PartNumber><ETag>&quot;def&quot;</ETag></Part></CompleteMultipartUpload>"#;
        assert_eq!(
            parse_complete(doc),
            Some(vec![(1, "\"abc\"".into()), (2, "\"def\"".into())])
        );
    }

    #[test]
    fn checksums_as_gcs_reports_them() {
        // The values Google's testbench reports for these bodies.
        assert_eq!(STANDARD.encode(crc32c(b"hello").to_be_bytes()), "mnG7TA==");
        assert_eq!(STANDARD.encode(crc32c(b"").to_be_bytes()), "AAAAAA==");
        assert_eq!(
            hex(&Md5::digest(b"hello")),
            "5d41402abc4b2a76b9719d911017c592"
        );
    }

    #[test]
    fn etags() {
        assert!(etag_matches("\"abc\"", "\"abc\""));
        assert!(etag_matches("abc", "\"abc\""));
        assert!(etag_matches("\"x\", W/\"abc\"", "\"abc\""));
        assert!(etag_matches("*", "\"abc\""));
        assert!(!etag_matches("\"abd\"", "\"abc\""));
    }
}
