#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub mod dedup;
pub mod sequence;
pub mod verify;
