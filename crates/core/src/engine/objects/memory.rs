//! An in-memory [`ObjectBackend`] with fault injection and a record of every write,
//! for tests and embedding.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use super::backend::{ObjectBackend, ObjectClass, ObjectVersion, PutCondition, PutOutcome};
use crate::engine::StorageError;

/// Which operation a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectOp {
    /// [`ObjectBackend::get`] and [`ObjectBackend::get_versioned`].
    Get,
    /// [`ObjectBackend::put`].
    Put,
    /// [`ObjectBackend::put_if`].
    PutIf,
    /// [`ObjectBackend::delete`].
    Delete,
    /// [`ObjectBackend::list`].
    List,
}

/// What a faulty call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectFault {
    /// Return an error; nothing happened.
    FailBeforePersist,
    /// Take effect, then return an error anyway (a connection reset after the store
    /// answered).
    FailAfterPersist,
    /// Wait, then take effect normally (a slow request).
    Delay(Duration),
    /// Take effect, then return an error and make the whole store unavailable (a
    /// network partition right after the request arrived) until
    /// [`MemoryObjects::set_unavailable`]`(false)`.
    PersistThenPartition,
    /// Return an error at once, while the write is still on its way: it reaches the
    /// store after this long and takes effect then, if its condition holds then (a
    /// request whose connection broke before it arrived). Conditional writes only.
    PersistLate(Duration),
    /// Take effect, then hold the answer until [`MemoryObjects::release_held`], then
    /// return an error: an answer lost while the rest of the world moves on, for
    /// deterministic interleavings ([`MemoryObjects::wait_held`] tells when a call is
    /// held). Conditional writes only.
    PersistThenHold,
    /// Read at once, then answer what was read after this long (a slow answer to a
    /// read: the world may change meanwhile). Reads only.
    AnswerLate(Duration),
}

struct Rule {
    op: ObjectOp,
    key_prefix: String,
    fault: ObjectFault,
    /// How many more calls it hits.
    times: usize,
}

/// One successful write, as recorded.
#[derive(Clone, Debug)]
pub struct RecordedWrite {
    /// The key written.
    pub key: String,
    /// The bytes written.
    pub bytes: Bytes,
    /// Its class.
    pub class: ObjectClass,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, (Bytes, ObjectClass, u64)>,
    generation: u64,
    rules: VecDeque<Rule>,
    unavailable: bool,
    ignore_conditions: bool,
    writes: Vec<RecordedWrite>,
}

/// Objects in a `BTreeMap` behind a mutex. Clones share the store (two "frontends").
#[derive(Clone, Default)]
pub struct MemoryObjects {
    state: Arc<Mutex<State>>,
    hold: Arc<Hold>,
}

/// The answers held by [`ObjectFault::PersistThenHold`].
struct Hold {
    /// Calls held so far.
    held: tokio::sync::watch::Sender<u64>,
    /// One permit per answer released.
    gate: tokio::sync::Semaphore,
}

impl Default for Hold {
    fn default() -> Self {
        Hold {
            held: tokio::sync::watch::Sender::new(0),
            gate: tokio::sync::Semaphore::new(0),
        }
    }
}

impl MemoryObjects {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make the next `times` calls of `op` on keys starting with `key_prefix` behave as
    /// `fault`. Rules apply in the order they were added.
    pub fn inject(&self, op: ObjectOp, key_prefix: &str, fault: ObjectFault, times: usize) {
        self.lock().rules.push_back(Rule {
            op,
            key_prefix: key_prefix.to_string(),
            fault,
            times,
        });
    }

    /// Wait until `n` calls in all have been held by [`ObjectFault::PersistThenHold`].
    pub async fn wait_held(&self, n: u64) {
        let mut held = self.hold.held.subscribe();
        let _ = held.wait_for(|&h| h >= n).await;
    }

    /// Let one held call answer (with its error).
    pub fn release_held(&self) {
        self.hold.gate.add_permits(1);
    }

    /// Drop every pending fault rule.
    pub fn clear_faults(&self) {
        self.lock().rules.clear();
    }

    /// Make every call fail (true) or work again (false): a store outage.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.lock().unavailable = unavailable;
    }

    /// Make conditional writes ignore their condition, as a store without conditional
    /// writes would (the engine must refuse such a store).
    pub fn set_ignore_conditions(&self, ignore: bool) {
        self.lock().ignore_conditions = ignore;
    }

    /// Every successful write so far, in order.
    pub fn writes(&self) -> Vec<RecordedWrite> {
        self.lock().writes.clone()
    }

    /// The keys stored now, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.lock().objects.keys().cloned().collect()
    }

    /// The object at `key` now, without faults.
    pub fn peek(&self, key: &str) -> Option<Bytes> {
        self.lock().objects.get(key).map(|o| o.0.clone())
    }

    /// Store bytes behind the engine's back (tampering, a torn upload).
    pub fn plant(&self, key: &str, bytes: Bytes) {
        let mut s = self.lock();
        s.generation += 1;
        let g = s.generation;
        s.objects
            .insert(key.to_string(), (bytes, ObjectClass::Tile, g));
    }

    /// The fault for this call, if any; consumes one use of the matching rule.
    async fn fault(&self, op: ObjectOp, key: &str) -> Result<Option<ObjectFault>, StorageError> {
        let fault = {
            let mut s = self.lock();
            if s.unavailable {
                return Err(StorageError::Backend("memory store unavailable".into()));
            }
            let hit = s
                .rules
                .iter()
                .position(|r| r.op == op && key.starts_with(&r.key_prefix));
            hit.map(|i| {
                let rule = &mut s.rules[i];
                let fault = rule.fault;
                rule.times -= 1;
                if rule.times == 0 {
                    s.rules.remove(i);
                }
                fault
            })
        };
        match fault {
            Some(ObjectFault::FailBeforePersist) => Err(StorageError::Backend(format!(
                "injected fault before {op:?} {key}"
            ))),
            Some(ObjectFault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(None)
            }
            other => Ok(other),
        }
    }

    fn after(
        &self,
        fault: Option<ObjectFault>,
        op: ObjectOp,
        key: &str,
    ) -> Result<(), StorageError> {
        match fault {
            Some(ObjectFault::FailAfterPersist) => Err(StorageError::Backend(format!(
                "injected fault after {op:?} {key}"
            ))),
            Some(ObjectFault::PersistThenPartition) => {
                self.set_unavailable(true);
                Err(StorageError::Backend(format!(
                    "injected partition after {op:?} {key}"
                )))
            }
            _ => Ok(()),
        }
    }

    fn store(s: &mut State, key: &str, bytes: Bytes, class: ObjectClass) -> ObjectVersion {
        s.generation += 1;
        let g = s.generation;
        s.objects.insert(key.to_string(), (bytes.clone(), class, g));
        s.writes.push(RecordedWrite {
            key: key.to_string(),
            bytes,
            class,
        });
        version(g)
    }
}

fn version(generation: u64) -> ObjectVersion {
    ObjectVersion {
        e_tag: Some(format!("\"{generation}\"")),
        version: Some(generation.to_string()),
    }
}

impl ObjectBackend for MemoryObjects {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, StorageError> {
        Ok(self.get_versioned(key).await?.map(|(b, _)| b))
    }

    async fn get_versioned(
        &self,
        key: &str,
    ) -> Result<Option<(Bytes, ObjectVersion)>, StorageError> {
        let fault = self.fault(ObjectOp::Get, key).await?;
        let found = self
            .lock()
            .objects
            .get(key)
            .map(|(b, _, g)| (b.clone(), version(*g)));
        if let Some(ObjectFault::AnswerLate(d)) = fault {
            tokio::time::sleep(d).await;
        }
        self.after(fault, ObjectOp::Get, key)?;
        Ok(found)
    }

    async fn put(&self, key: &str, bytes: Bytes, class: ObjectClass) -> Result<(), StorageError> {
        let fault = self.fault(ObjectOp::Put, key).await?;
        Self::store(&mut self.lock(), key, bytes, class);
        self.after(fault, ObjectOp::Put, key)
    }

    async fn put_if(
        &self,
        key: &str,
        bytes: Bytes,
        class: ObjectClass,
        condition: PutCondition,
    ) -> Result<PutOutcome, StorageError> {
        let fault = self.fault(ObjectOp::PutIf, key).await?;
        if let Some(ObjectFault::PersistLate(delay)) = fault {
            let (store, late_key) = (self.clone(), key.to_string());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let mut s = store.lock();
                let current = s.objects.get(&late_key).map(|o| version(o.2));
                let holds = match &condition {
                    PutCondition::Absent => current.is_none(),
                    PutCondition::Matches(v) => current.as_ref() == Some(v),
                };
                if holds {
                    Self::store(&mut s, &late_key, bytes, class);
                }
            });
            return Err(StorageError::Backend(format!(
                "injected fault: {key} still on its way"
            )));
        }
        let outcome = {
            let mut s = self.lock();
            let current = s.objects.get(key).map(|o| version(o.2));
            let holds = s.ignore_conditions
                || match &condition {
                    PutCondition::Absent => current.is_none(),
                    PutCondition::Matches(v) => current.as_ref() == Some(v),
                };
            match holds {
                true => PutOutcome::Written(Self::store(&mut s, key, bytes, class)),
                false => PutOutcome::ConditionFailed,
            }
        };
        if fault == Some(ObjectFault::PersistThenHold) {
            self.hold.held.send_modify(|h| *h += 1);
            if let Ok(permit) = self.hold.gate.acquire().await {
                permit.forget();
            }
            return Err(StorageError::Backend(format!(
                "injected fault: the answer to a write of {key} was lost"
            )));
        }
        self.after(fault, ObjectOp::PutIf, key)?;
        Ok(outcome)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let fault = self.fault(ObjectOp::Delete, key).await?;
        self.lock().objects.remove(key);
        self.after(fault, ObjectOp::Delete, key)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let fault = self.fault(ObjectOp::List, prefix).await?;
        let keys = self
            .lock()
            .objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        self.after(fault, ObjectOp::List, prefix)?;
        Ok(keys)
    }
}
