"""Preallocated, depth-major KV cache (docs/design.md section 5).

A looped model has three kinds of attention timelines, each a `Timeline` here:

    prelude   1 level                    (Raven: the prelude blocks run once per position)
    core      one level per depth r      (level r-1 holds the keys of recurrence r)
    coda      one level per readout depth in use (d1, d2, rewind, target: every one of them is
              computed for every committed position, so each coda timeline is complete)

Sequences. Every buffer has a leading sequence dimension: row b is one sequence's cache, and
the sequences of a batch never read each other's rows (each lane reads its own row only).

Main line. Keys are indexed by absolute position: `k[b, level, layer, :, p]` is position p's key.
Committed positions and the live lanes of the main speculation chain (the first-proposal
chain: each lane sits at its own position) share it, so a lane at depth r reads its whole
ancestor path as one slice `k[b, r-1, layer, :, :S]` masked to positions <= its own, and lanes
whose (row, level) cells are in arithmetic progression (a wavefront at depths r, r+d1, r+2*d1,
...; one depth across the sequences of a batch) read through one strided view: no gather.
A main-line lane writes straight into its position, so committing it moves the sequence's
`length` (held by the sequence, fastdec.strategies) and copies nothing; rollback drops lane
objects: nothing is erased, nothing is copied. Both are O(1) per sequence.

Side slots. A lane off the main line (a LoopSpec second proposal, which sits at the same
position as a first-proposal lane) keeps its own rows in `side_k[slot, level, layer]`; it
reads the main line up to its parent and its own row on top, in a materialised copy (the one
place a copy happens: its position's main-line row belongs to another lane). When it wins, its
rows are copied into the main line at its position (`promote`), O(levels) work. Side slots
belong to one sequence (row) each.

INVARIANT: slots at or past a sequence's `length` that no live lane has written at that level, side slots
not owned by a live lane, levels deeper than a lane's depth, and the trash row/slot (where
padded rows write) are garbage and never influence a result. Every read is masked to
positions <= the reading lane's position, along its own ancestor path, at its own level.
Rows no running sequence owns are garbage too. `poison` fills exactly those slots with large
random garbage so tests can check it bitwise.

Shapes: B sequence rows, levels, layers, KV key/value heads, S attended positions (+1 trash
position), D head dim. A (row, level) pair is a *cell*, numbered row * levels + level.
"""

from __future__ import annotations

import torch


def timeline_bytes(
    levels: int,
    layers: int,
    kv_heads: int,
    head_dim: int,
    capacity: int,
    n_side: int,
    rows: int,
    itemsize: int,
) -> int:
    """The bytes a Timeline of this shape allocates (k, v, side_k, side_v), before allocating it."""
    main = rows * levels * layers * kv_heads * (capacity + 1) * head_dim
    side = rows * (n_side + 1) * levels * layers * kv_heads * head_dim
    return 2 * (main + side) * itemsize


def kv_cache_bytes(
    cfg, depth: int, n_readouts: int, capacity: int, n_side: int, itemsize: int, rows: int = 1
) -> int:
    """The bytes a KVCache of these arguments allocates (its three timelines), from the model's
    config alone: what a Decoder weighs before it makes an engine, and what certify's memory check
    counts before any weights are loaded (proofs/cost/kv_need.py)."""
    return sum(
        timeline_bytes(levels, layers, cfg.n_kv_heads, cfg.head_dim, capacity, n_side, rows, itemsize)
        for levels, layers in ((1, cfg.n_prelude), (depth, cfg.n_core), (n_readouts, cfg.n_coda))
    )


class Timeline:
    """Keys and values of one stack of attention layers at several levels, for B sequences.

    k, v:           (B, levels, layers, KV, S + 1, D)   main line; position S is the trash position
    side_k, side_v: (B, n_side + 1, levels, layers, KV, D)   side lanes' own rows; slot n_side is trash
    """

    def __init__(
        self,
        levels: int,
        layers: int,
        kv_heads: int,
        head_dim: int,
        capacity: int,
        n_side: int,
        dtype: torch.dtype,
        device,
        rows: int = 1,
    ):
        self.levels, self.layers, self.capacity = levels, layers, capacity
        self.n_side, self.rows = n_side, rows
        shape = (rows, levels, layers, kv_heads, capacity + 1, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        side = (rows, n_side + 1, levels, layers, kv_heads, head_dim)
        self.side_k = torch.zeros(side, dtype=dtype, device=device)
        self.side_v = torch.zeros(side, dtype=dtype, device=device)
        self.kv_index = torch.arange(kv_heads, device=device)[None, :]  # (1, KV)
        # compiled engines (fastdec/compiled.py) write and read the buffers through these flat
        # (N, D) views only (`put`): a graph then mutates its inputs themselves, which inductor does
        # in place; index_copy_ into a view of them it turns into a copy of the whole buffer
        self.put = False
        self.k_flat, self.v_flat = self.k.view(-1, head_dim), self.v.view(-1, head_dim)
        self.side_k_flat, self.side_v_flat = self.side_k.view(-1, head_dim), self.side_v.view(-1, head_dim)
        self.layer_index = [torch.tensor(i, device=device) for i in range(layers)]
        # flat write places (write_index / write_at): k.view(-1, D) row of (b, level, layer, kv, p)
        # is ((b * levels + level) * layers + layer) * KV + kv) * (S + 1) + p
        self._cell = layers * kv_heads * (capacity + 1)  # rows of one (b, level) cell
        self._side_cell = layers * kv_heads
        heads = torch.arange(kv_heads, device=device)
        self._main_off = [((i * kv_heads + heads) * (capacity + 1))[None, :] for i in range(layers)]
        self._side_off = [(i * kv_heads + heads)[None, :] for i in range(layers)]

    @property
    def nbytes(self) -> int:
        """Bytes of its four buffers: timeline_bytes of its shape."""
        return sum(t.numel() * t.element_size() for t in (self.k, self.v, self.side_k, self.side_v))

    @property
    def trash_pos(self) -> int:
        return self.capacity

    @property
    def trash_slot(self) -> int:
        return self.n_side

    # -- writes (index tensors only: the same code runs inside a CUDA graph) ------------------
    def write(
        self,
        layer: int,
        k: torch.Tensor,
        v: torch.Tensor,
        row: torch.Tensor,
        level: torch.Tensor,
        main_pos: torch.Tensor,
        side_slot: torch.Tensor | None,
    ) -> None:
        """k, v (W, KV, D) rows; row, level, main_pos, side_slot (W,) long.

        Main rows write at (row, level, main_pos); side rows have main_pos = trash and write
        their own slot; padded rows write both trash places. side_slot None: no side rows at all.
        """
        self.write_at(layer, k, v, self.write_index(row, level, main_pos, side_slot))

    def write_index(
        self,
        row: torch.Tensor,
        level: torch.Tensor,
        main_pos: torch.Tensor,
        side_slot: torch.Tensor | None,
        rows: tuple[slice, slice] | None = None,
    ) -> tuple:
        """One call's write places as flat row numbers of k.view(-1, D) (and side_k's) at layer 0,
        KV head 0: computed once per call, shared by every layer (`write_at`).

        rows (eager calls, whose rows are main lanes, then side lanes, then padding): (main rows,
        side rows); only those write the main line / their side slots, the others' writes (to
        the trash position or slot) are skipped. None: every row writes both (graph-safe)."""
        mrows, srows = rows if rows is not None else (slice(None), slice(None))
        main = (row[mrows] * self.levels + level[mrows]) * self._cell + main_pos[mrows]
        if side_slot is None:
            return main, mrows, None, srows
        side = (
            (row[srows] * (self.n_side + 1) + side_slot[srows]) * self.levels + level[srows]
        ) * self._side_cell
        return main, mrows, side, srows

    def write_at(self, layer: int, k: torch.Tensor, v: torch.Tensor, at) -> None:
        """`write` with the call's places from `write_index`: one index_copy_ per buffer over
        the writing rows' KV * rows of D (a 5-index index_put_ is slower on a CPU; the
        same values land in the same places; duplicate places are only the trash position and slot)."""
        main, mrows, side, srows = at
        d = k.shape[2]
        idx = (main[:, None] + self._main_off[layer]).view(-1)  # (rows * KV,)
        if self.put:  # compiled: the flat buffers themselves, index_put_ (inductor writes in place)
            writes = [(self.k_flat, idx, k[mrows]), (self.v_flat, idx, v[mrows])]
            if side is not None:
                sidx = (side[:, None] + self._side_off[layer]).view(-1)
                writes += [(self.side_k_flat, sidx, k[srows]), (self.side_v_flat, sidx, v[srows])]
            for buf, at_rows, rows in writes:
                buf.index_put_((at_rows,), rows.reshape(-1, d))
            return
        self.k.view(-1, d).index_copy_(0, idx, k[mrows].reshape(-1, d))
        self.v.view(-1, d).index_copy_(0, idx, v[mrows].reshape(-1, d))
        if side is not None:
            sidx = (side[:, None] + self._side_off[layer]).view(-1)
            self.side_k.view(-1, d).index_copy_(0, sidx, k[srows].reshape(-1, d))
            self.side_v.view(-1, d).index_copy_(0, sidx, v[srows].reshape(-1, d))

    # -- reads ----------------------------------------------------------------------------------
    def run_view(self, layer: int, cell0: int, delta: int, n: int, length: int):
        """(n, KV, length, D) views of lanes in cells cell0 + i*delta (delta >= 0): no copy.

        A cell is (row, level) numbered row * levels + level: a wavefront of one sequence, or
        one level across sequences, is a single view."""
        out = []
        for t in (self.k, self.v):
            st = t.stride()  # contiguous: st[0] = levels * st[1], so a cell is st[1] elements
            out.append(
                t.as_strided(
                    (n, t.shape[3], length, t.shape[5]),
                    (delta * st[1], st[3], st[4], st[5]),
                    t.storage_offset() + cell0 * st[1] + layer * st[2],
                )
            )
        return out

    def side_view(self, layer: int, rows: list[tuple[int, int, int, int]], length: int):
        """Materialised (n, KV, length, D) keys/values for side lanes (row, slot, level, pos):
        the main line at the lane's level with the lane's own row at its position."""
        out = []
        for main, side in ((self.k, self.side_k), (self.v, self.side_v)):
            parts = []
            for row, slot, level, pos in rows:
                m = main[row, level, layer, :, :length].clone()  # (KV, length, D): the documented copy
                m[:, pos] = side[row, slot, level, layer]
                parts.append(m)
            out.append(torch.stack(parts))
        return out

    def gather(
        self,
        layer: int,
        row: torch.Tensor,
        level: torch.Tensor,
        pos: torch.Tensor,
        side_slot: torch.Tensor,
        is_side: torch.Tensor,
        key_pos: torch.Tensor,
    ):
        """Graph-safe read: (W, KV, S, D) copies selected by index tensors, side rows overlaid
        at their position; key_pos = arange(S). Used under CUDA graphs, where views cannot move,
        and for fragmented eager calls. is_side None: no side rows (nothing to overlay)."""
        length = key_pos.shape[0]
        flat_index = (row * self.levels + level) * self.layers + layer  # flat (row, level, layer), (W,)
        if is_side is not None:
            at = ((key_pos[None, :] == pos[:, None]) & is_side[:, None])[:, None, :, None]  # (W, 1, S, 1)
        if self.put:
            overlay = is_side is not None and at
            return self._gather_flat(layer, flat_index, row, level, side_slot, key_pos, overlay)
        out = []
        for main, side in ((self.k, self.side_k), (self.v, self.side_v)):
            flat = main.view(-1, *main.shape[3:])[:, :, :length]  # (B*levels*layers, KV, length, D)
            g = flat.index_select(0, flat_index)
            if is_side is None:
                out.append(g)
                continue
            own = side.select(3, layer)[row, side_slot, level]  # (W, KV, D); an int index: no host sync
            out.append(torch.where(at, own[:, :, None, :], g))
        return out

    def _gather_flat(self, layer: int, flat_index, row, level, side_slot, key_pos, at):
        """`gather` through the flat views (compiled engines): one index per (row, KV head, key);
        at: where side rows overlay their own row ((W, 1, S, 1) bool), False without side rows."""
        kv = self.kv_index.shape[1]
        w, length = flat_index.shape[0], key_pos.shape[0]
        heads = (flat_index[:, None] * kv + self.kv_index).view(-1)  # (W*KV,) flat (row, level, layer, head)
        out = []
        for main, side in ((self.k_flat, self.side_k_flat), (self.v_flat, self.side_v_flat)):
            # one index per (row, head): its keys are one contiguous block, which the generated
            # loops then copy as such (an index per key made them load every float alone)
            blocks = main.view(-1, self.capacity + 1, main.shape[1])  # (N / (S + 1), S + 1, D)
            g = blocks[heads, :length].view(w, kv, length, main.shape[1])
            if at is False:
                out.append(g)
                continue
            cell = ((row * (self.n_side + 1) + side_slot) * self.levels + level) * self.layers + layer
            own = side[cell[:, None] * kv + self.kv_index]  # (W, KV, D)
            out.append(torch.where(at, own[:, :, None, :], g))
        return out

    # -- bookkeeping ------------------------------------------------------------------------
    def promote(self, row: int, slot: int, pos: int) -> None:
        """Copy a side lane's rows (every level, every layer) into the main line at `pos`."""
        self.k[row, :, :, :, pos] = self.side_k[row, slot]
        self.v[row, :, :, :, pos] = self.side_v[row, slot]

    def fill_forward(self, row: int, pos: int, src: int, dst: list[int]) -> None:
        """Copy level `src` of position `pos` into levels `dst` (lossy adaptive-verify only)."""
        for d in dst:
            self.k[row, d, :, :, pos] = self.k[row, src, :, :, pos]
            self.v[row, d, :, :, pos] = self.v[row, src, :, :, pos]

    def poison(
        self, gen: torch.Generator, scale: float, keep_main: torch.Tensor, keep_side: torch.Tensor
    ) -> None:
        """Overwrite every slot not kept with N(0, scale^2) garbage (finite, never NaN: masked
        attention multiplies hidden values by exact zeros, and 0 x NaN would be NaN).

        keep_main (B, levels, S + 1) bool, keep_side (B, n_side + 1, levels) bool.
        """
        km = keep_main.to(self.k.device)[:, :, None, None, :, None]
        ks = keep_side.to(self.k.device)[:, :, :, None, None, None]
        for t, keep in ((self.k, km), (self.v, km), (self.side_k, ks), (self.side_v, ks)):
            g = (torch.randn(t.shape, generator=gen, dtype=torch.float64) * scale).to(t.dtype).to(t.device)
            t.copy_(torch.where(keep, t, g))


class KVCache:
    """The three timelines of one model at one capacity, for `rows` sequences.

    Which positions are committed is each sequence's state (its `length`), not the cache's:
    the cache only holds buffers, and a sequence's rollback never touches them.
    """

    def __init__(
        self,
        cfg,
        depth: int,
        n_readouts: int,
        capacity: int,
        n_side: int,
        dtype: torch.dtype,
        device,
        rows: int = 1,
    ):
        def tl(levels, layers):
            return Timeline(
                levels, layers, cfg.n_kv_heads, cfg.head_dim, capacity, n_side, dtype, device, rows
            )

        self.capacity, self.n_side, self.rows = capacity, n_side, rows
        self.prelude = tl(1, cfg.n_prelude)
        self.core = tl(depth, cfg.n_core)
        self.coda = tl(n_readouts, cfg.n_coda)

    def timelines(self):
        return (self.prelude, self.core, self.coda)

    @property
    def nbytes(self) -> int:
        """Bytes of its buffers (kv_cache_bytes of its arguments)."""
        return sum(t.nbytes for t in self.timelines())

    def promote(self, row: int, slot: int, pos: int) -> None:
        for t in self.timelines():
            if t.layers:
                t.promote(row, slot, pos)

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        """Row dst's positions [0, length) := row src's, every level (a shared prompt's prefill)."""
        for t in self.timelines():
            if t.layers:
                t.k[dst, :, :, :, :length] = t.k[src, :, :, :, :length]
                t.v[dst, :, :, :, :length] = t.v[src, :, :, :, :length]
