#![no_main]

libfuzzer_sys::fuzz_target!(|input: hooklatch_fuzz::SequenceInput| hooklatch_fuzz::sequence(input));
