//! Compile-time checks of the x86_64 layout gcc 12 gives `struct ibv_sa_path_rec` of
//! `<infiniband/sa.h>` (the other mirrors' are in `rverbs-abi`).

use core::mem::{align_of, offset_of, size_of};

use super::*;

macro_rules! layout {
    ($t:ty, size = $size:expr, align = $align:expr $(, $($f:ident).+ = $off:expr)* $(,)?) => {
        const _: () = assert!(size_of::<$t>() == $size);
        const _: () = assert!(align_of::<$t>() == $align);
        $(const _: () = assert!(offset_of!($t, $($f).+) == $off);)*
    };
}

layout!(ibv_sa_path_rec, size = 64, align = 8,
    dgid = 0, sgid = 16, dlid = 32, slid = 34, raw_traffic = 36, flow_label = 40,
    hop_limit = 44, traffic_class = 45, reversible = 48, numb_path = 52, pkey = 54, sl = 56,
    mtu_selector = 57, mtu = 58, rate_selector = 59, rate = 60,
    packet_life_time_selector = 61, packet_life_time = 62, preference = 63);
