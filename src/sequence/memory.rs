//! [`MemorySequences`]: positions in process memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::{SequenceError, SequenceStore};

/// Positions in process memory. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct MemorySequences {
    positions: Arc<Mutex<HashMap<String, u64>>>,
}

impl MemorySequences {
    /// No positions yet.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SequenceStore for MemorySequences {
    async fn position(&self, resource: &str) -> Result<Option<u64>, SequenceError> {
        let positions = self
            .positions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(positions.get(resource).copied())
    }

    async fn advance(&self, resource: &str, sequence: u64) -> Result<bool, SequenceError> {
        let mut positions = self
            .positions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match positions.get_mut(resource) {
            Some(position) if *position >= sequence => Ok(false),
            Some(position) => {
                *position = sequence;
                Ok(true)
            }
            None => {
                positions.insert(resource.to_owned(), sequence);
                Ok(true)
            }
        }
    }
}
