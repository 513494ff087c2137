// Fuzz entry points shared by the libFuzzer binaries (tools/fuzz.sh builds
// them with clang -fsanitize=fuzzer,address,undefined) and by
// fuzz_regression_test (Bazel, gcc), which replays every file under
// fuzz/corpus/ and fuzz/crashers/ through the same functions, so a crash
// found once stays a regression test.
//
// Each entry takes arbitrary bytes, must never crash, leak or hang on them,
// and returns 0 (libFuzzer's convention). Inputs that violate a documented
// contract of the code under test abort (assert-style), which the fuzzer
// reports as a crash. Thread-compatible: one call at a time per process is
// not required, but the ring entry creates a memfd per call.
#ifndef PFM_FUZZ_FUZZ_TARGETS_H_
#define PFM_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>

namespace pfm::fuzz {

// The daemon's request path: FrameDecoder fed in pieces (the split points
// come from the input), every complete body parsed as JSON and, when it is a
// request object with a "spec", validated with SessionSpec::FromJson; plus
// the encode/decode round trip of each body.
int FuzzWireDecoder(const uint8_t* data, size_t size);

// The compact codec: DecodeRecord over the input (its contract: consumed
// bytes within avail, state untouched on failure, decoded records re-encode
// and decode to the same record; reset markers included) and DecodeRecords
// against it, then RingCursor over the input laid out as a two-chunk data
// area in both formats, Next and NextBatch alike.
int FuzzCompactDecoder(const uint8_t* data, size_t size);

// Encode once, copy to every ring (kernel/uapi/ring_format.h CompactBatch):
// records and up to six rings at chunk offsets and decoder states of their
// own, all from the input. Each ring's copy of the shared encoding must be
// exactly the bytes its own record-by-record writer produces with resets at
// the batch's reset points (with one ring, or rings in step, exactly a lone
// writer's bytes), and must decode (RingCursor Next and NextBatch) to the
// records; EncodeRun and DecodeRecords must agree with EncodeRecord and
// DecodeRecord one by one.
int FuzzCompactBatch(const uint8_t* data, size_t size);

// The fused BTS drain's encoder: raw BTS records from the input, with a
// clock, origin, ring offsets and start state, must encode (EncodeBts,
// EncodeBtsRun) to exactly the segments, bytes, state and clock of the
// translate-then-encode path (TranslateBts, Encode, EncodeRun), refusing a
// batch exactly when a record is not a user branch.
int FuzzCompactBts(const uint8_t* data, size_t size);

// A hostile writer: a ring memfd whose header and data come from the input
// (first byte chooses verbatim header or a valid template with fuzzed
// positions/counters), sealed, then RingReader::Map, Snapshot and Consume.
int FuzzRingReader(const uint8_t* data, size_t size);

// A process's mappings (kernel/uapi/proc_maps.h): the input as the binary
// encoding (refused, or decoding then encoding gives it back exactly) and
// as /proc/PID/maps text (parsed both ways; what is parsed is encodable,
// round-trips, and KeepFileBacked leaves only file paths).
int FuzzMaps(const uint8_t* data, size_t size);

// The GDB stub's input path (userspace/gdbstub): a PacketReader (16 KiB
// payload limit) fed the input in two pieces cut where the first byte says,
// never buffering past its limit; every packet through ParseRequest (a
// malformed one names its error; memory writes carry exactly their length),
// 'G' blocks of register size through DecodeAmd64 (decode, encode, decode
// is stable), qXfer btrace reads served through BtsXml/XferSlice, and the
// unescaped payload re-framed by EncodePacket and read back unchanged.
int FuzzRsp(const uint8_t* data, size_t size);

// A trace file (libpfm-bts/include/pfm/trace_file.h): the magic, a version
// from the first byte (3, 2, or the byte), then the rest of the input as
// blocks, in a memfd. Open, ReadTrace, the reader and the skipping reader
// must agree (records, maps, completeness, cut reason; a refusal is
// INVALID_ARGUMENT), hand out pieces of at most kTraceReaderChunk records
// and no more records than the file has bytes; what was read must write
// (compact and fixed) and read back exactly.
int FuzzTraceFile(const uint8_t* data, size_t size);

}  // namespace pfm::fuzz

#endif  // PFM_FUZZ_FUZZ_TARGETS_H_
