//! Control of a live mount from any thread: [`Handle`], which [`Mount`]'s own controls
//! and the control socket ([`crate::control`]) both go through. It sits below both, so
//! that the control server needs nothing of the mount but a handle.
//!
//! [`Mount`]: crate::Mount

use std::sync::Arc;

use crate::Error;
use crate::fs::Shared;
use crate::profile::Profile;
use crate::state::{CutMode, CutReport, Faults};

/// Controls a mount from anywhere (cloneable, `Send`); see the methods of [`Mount`].
///
/// [`Mount`]: crate::Mount
#[derive(Clone)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").finish_non_exhaustive()
    }
}

impl Handle {
    /// See [`Mount::cut`](crate::Mount::cut).
    pub fn cut(&self, mode: CutMode) -> Result<CutReport, Error> {
        // Set before taking the lock: operations arriving from now on fail at once
        // instead of queueing behind the cut, and delayed ones stop waiting.
        self.shared.freeze();
        let mut st = self.shared.lock();
        if st.cut_done {
            return Err(Error::Frozen);
        }
        st.cut(mode).map_err(Error::Cut)
    }

    /// See [`Mount::freeze`](crate::Mount::freeze).
    pub fn freeze(&self) {
        self.shared.freeze();
        self.shared.lock().frozen = true;
    }

    /// Whether the mount is frozen.
    pub fn is_frozen(&self) -> bool {
        self.shared.frozen()
    }

    /// See [`Mount::set_profile`](crate::Mount::set_profile).
    pub fn set_profile(&self, profile: Profile) {
        self.shared
            .latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0 = profile;
    }

    /// See [`Mount::profile`](crate::Mount::profile).
    pub fn profile(&self) -> Profile {
        self.shared
            .latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// See [`Mount::set_faults`](crate::Mount::set_faults).
    pub fn set_faults(&self, faults: Faults) {
        self.shared.lock().faults = faults;
    }

    /// See [`Mount::update_faults`](crate::Mount::update_faults).
    pub fn update_faults(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.shared.lock().faults)
    }

    /// See [`Mount::faults`](crate::Mount::faults).
    pub fn faults(&self) -> Faults {
        self.shared.lock().faults.clone()
    }
}
