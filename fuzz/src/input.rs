//! A cursor over the fuzzer's bytes: every read succeeds, reading zeros past the end, so a
//! harness never has to reject a short input (libFuzzer shrinks inputs freely).

/// Reads little-endian integers and slices from the front of the input.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte, 0 past the end.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next three bytes, little-endian, in the low 24 bits.
    pub fn u24(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), 0])
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next `n` bytes, or fewer at the end.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// A record: a 16-bit little-endian length, then that many bytes (fewer at the end).
    pub fn record(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16());
        self.bytes(n)
    }
}

/// Runs up to 8 operations of one input: each starts with a byte that picks one of
/// `kinds` operations (`op(input, kind)`, `kind < kinds`), until the input is used up.
pub fn each_op(data: &[u8], kinds: u8, mut op: impl FnMut(&mut Input<'_>, u8)) {
    let mut inp = Input::new(data);
    for _ in 0..8 {
        if inp.is_empty() {
            break;
        }
        let kind = inp.u8() % kinds;
        op(&mut inp, kind);
    }
}

/// Appends `bytes` as a [`Input::record`] to `out` (the seed generator's side).
pub fn push_record(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u16::try_from(bytes.len()).expect("a record holds at most 65535 bytes");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The rule of a posted list (ibv_post_send(3), ibv_post_recv(3)): with no refused request
/// (`stop` `None`) the call returns 0, leaves `*bad_wr` (`bad`, set to `sentinel` before the
/// call) alone and posts all `k`; otherwise it returns the refusal's errno, `*bad_wr` names
/// the first refused request (`base + at`), and exactly the `at` requests before it were
/// posted (`posted`).
#[track_caller]
pub fn assert_list_stop<W>(rc: i32, bad: *mut W, sentinel: *mut W, base: *mut W, posted: usize, k: usize, stop: Option<(usize, i32)>) {
    match stop {
        None => {
            assert_eq!((rc, bad), (0, sentinel));
            assert_eq!(posted, k);
        }
        Some((at, errno)) => {
            assert_eq!(rc, errno);
            assert_eq!(bad, base.wrapping_add(at), "*bad_wr names the first refused request");
            assert_eq!(posted, at, "exactly the requests before it are posted");
        }
    }
}
