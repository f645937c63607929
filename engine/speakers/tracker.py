"""Speaker labels for a session's closed segments: online assignment, then one global re-clustering at stop.

Online (``SpeakerTracker.assign``), each segment with enough speech is compared with the centroids of the
speakers seen so far (a bounded number): it joins the most similar speaker when the cosine similarity reaches
``similarity_threshold``, and otherwise opens a new speaker while fewer than ``max_speakers`` exist. Segments
too short to embed reliably take the previous segment's label: in conversation the next short utterance is
more often the same speaker continuing than anyone else, and a wrong new speaker costs more than a wrong
continuation. Work per segment is O(max_speakers x dim), whatever the session length.

At stop (``SpeakerTracker.recluster``), all trusted embeddings are clustered together (average-linkage
agglomerative clustering on cosine distance, the number of speakers set by a distance threshold). Clusters are
mapped onto the streaming labels so that labels which agree stay as they are, and a segment is only moved
when the global clustering says so clearly; a weak disagreement keeps the streaming label, because every
relabel is a visible correction of a sentence the user has already read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpeakerConfig:
    """Thresholds of speaker assignment. Similarities are cosines of L2-normalised embeddings in [-1, 1]."""

    similarity_threshold: float = 0.78
    """Cosine to the nearest speaker centroid below which a segment starts a new speaker. Same-speaker
    segment-to-centroid cosines sat at 0.81-0.94 on read speech and around 0.85 (median) in AMI meetings, where
    different speakers reached 0.75 (median) with this encoder; ``python -m bench.speaker_fit`` found the fitting
    set's DER flat from 0.72 to 0.78 and worse above (a reader split in two), so it stays at the top of that range."""
    min_embed_speech_s: float = 1.0
    """Segments with less speech (seconds) get a provisional label from context, never a new speaker."""
    min_new_speaker_speech_s: float = 2.0
    """A segment must hold this much speech (seconds) to open a new speaker; shorter embedded segments join
    their nearest speaker when similar enough and otherwise take the context label (short embeddings are
    noisy: on reverberant or far-field speech 1-2 s segments of one voice fell below the threshold)."""
    max_speakers: int = 8
    """Hard cap on distinct labels in a session; past it a segment joins its nearest speaker."""
    max_centroid_weight_s: float = 60.0
    """A speaker centroid averages at most this many seconds of speech (older evidence decays), so that a
    voice drifting over a long session (distance to the microphone, fatigue) is still followed."""
    recluster_distance: float = 0.15
    """Average-linkage cosine distance at which global clustering stops merging (1 - similarity). Kept tight:
    looser values merged distinct AMI speakers whose voices this encoder places close together."""
    recluster_margin: float = 0.06
    """A segment is moved at re-clustering only if it is at least this much more similar (cosine) to its new
    speaker's centroid than to its streaming speaker's."""
    max_recluster_segments: int = 4000
    """Beyond this many embedded segments re-clustering is skipped (its memory grows with the square)."""

    def __post_init__(self) -> None:
        if not -1.0 <= self.similarity_threshold <= 1.0:
            raise ValueError(f"similarity_threshold must be a cosine in [-1, 1], got {self.similarity_threshold}")
        if self.min_embed_speech_s < 0.0:
            raise ValueError(f"min_embed_speech_s must be >= 0, got {self.min_embed_speech_s}")
        if self.min_new_speaker_speech_s < self.min_embed_speech_s:
            raise ValueError("min_new_speaker_speech_s must be >= min_embed_speech_s")
        if self.max_speakers < 1:
            raise ValueError(f"max_speakers must be >= 1, got {self.max_speakers}")
        if self.max_centroid_weight_s <= 0.0:
            raise ValueError(f"max_centroid_weight_s must be > 0, got {self.max_centroid_weight_s}")
        if not 0.0 <= self.recluster_distance <= 2.0:
            raise ValueError(f"recluster_distance must be a cosine distance in [0, 2], got {self.recluster_distance}")
        if self.recluster_margin < 0.0:
            raise ValueError(f"recluster_margin must be >= 0, got {self.recluster_margin}")


@dataclass(frozen=True, slots=True)
class _Choice:
    """The label for an embedded segment; ``backed``: its embedding backs the label (then it joins the centroid);
    ``new``: the label is a new speaker's."""

    label: int
    backed: bool
    new: bool


class SpeakerTracker:
    """Per-session online assignment; pure and synchronous; cost per segment bounded (no O(N^2) per new segment).

    ``labels`` maps every segment id seen so far to its current label (0, 1, 2, ... in order of appearance).
    ``last_comparisons`` is the number of centroid similarities the last ``assign`` computed (at most
    ``max_speakers``): the per-segment work, exposed so that the bound can be checked.
    """

    def __init__(self, config: SpeakerConfig) -> None:
        self.config = config
        self.labels: dict[int, int] = {}
        self.last_comparisons = 0
        self._order: list[int] = []  # segment ids in arrival order (context for short segments)
        self._embedded: dict[int, tuple[np.ndarray, float]] = {}  # id -> (unit embedding, speech seconds)
        self._sums: np.ndarray | None = None  # [max_speakers, dim] weighted embedding sums per speaker
        self._weights = np.zeros(config.max_speakers, dtype=np.float64)  # seconds behind each sum
        self._speakers = 0  # labels 0 .. _speakers-1 exist

    @property
    def num_speakers(self) -> int:
        """Distinct labels handed out so far."""
        return max(self._speakers, max(self.labels.values(), default=-1) + 1)

    def assign(self, segment_id: int, embedding: np.ndarray | None, speech_s: float, new_voice: bool = False) -> int:
        """Label one closed segment and return the label.

        ``embedding`` is the segment's speaker embedding (any scale; it is normalised here) or None when the
        segment was too short to embed. A segment with ``speech_s < min_embed_speech_s`` or no embedding gets
        the previous segment's label (0 for the first segment) and never opens a new speaker. ``new_voice``: the
        turn detector heard another voice begin this segment (it was split off the one before), evidence enough
        to open a new speaker from ``min_embed_speech_s`` of speech instead of ``min_new_speaker_speech_s``.
        Each ``segment_id`` may be assigned once (``ValueError`` otherwise).
        """
        if segment_id in self.labels:
            raise ValueError(f"segment {segment_id} already has a speaker label")
        self.last_comparisons = 0
        if embedding is None or speech_s < self.config.min_embed_speech_s:
            label = self._context_label(len(self._order))
        else:
            unit = unit_vector(embedding)
            choice = self._nearest_or_new(unit, speech_s, len(self._order), new_voice)
            label = choice.label
            if choice.backed:
                self._add_to_centroid(label, unit, speech_s)
            self._embedded[segment_id] = (unit, speech_s)
        self._order.append(segment_id)
        self.labels[segment_id] = label
        return label

    def peek(self, embedding: np.ndarray, speech_s: float, new_voice: bool = False) -> int:
        """The label ``assign`` would give a segment with this embedding now, changing nothing: a provisional label
        for the voice of an open segment."""
        if speech_s < self.config.min_embed_speech_s:
            return self._context_label(len(self._order))
        return self._choose(unit_vector(embedding), speech_s, len(self._order), new_voice).label

    def recluster(self) -> dict[int, int]:
        """Cluster all embedded segments globally and relabel where the clustering is clearly better.

        Call at stop. Returns ``{segment_id: new_label}`` for the segments whose label changed (and updates
        ``labels``); labels that agree with the clustering are kept, new clusters get unused labels. Short
        segments follow their (possibly relabelled) predecessor again. The streaming centroids are rebuilt
        from the final labels, so ``assign`` may go on afterwards.
        """
        ids = [sid for sid in self._order if sid in self._embedded]
        if len(ids) < 2 or len(ids) > self.config.max_recluster_segments:
            return {}
        vectors = np.stack([self._embedded[sid][0] for sid in ids]).astype(np.float64)
        seconds = np.array([self._embedded[sid][1] for sid in ids])
        streaming = np.array([self.labels[sid] for sid in ids])
        clusters = _agglomerate(vectors, self.config.recluster_distance, self.config.max_speakers)
        proposed = _map_onto(clusters, streaming, seconds)
        final = _compact(
            _keep_weak_changes(vectors, seconds, streaming, proposed, self.config.recluster_margin),
            first_new=int(streaming.max()) + 1,
        )
        if final.max() >= self.config.max_speakers:
            # Kept streaming labels plus new clusters would break the cap: the streaming labels stand.
            return {}

        new_labels = dict(self.labels)
        for sid, label in zip(ids, final.tolist(), strict=True):
            new_labels[sid] = int(label)
        for index, sid in enumerate(self._order):
            if sid not in self._embedded:
                new_labels[sid] = self._context_label(index, new_labels)
        changed = {sid: label for sid, label in new_labels.items() if label != self.labels[sid]}
        self.labels = new_labels
        self._rebuild_centroids()
        return changed

    def _context_label(self, index: int, labels: dict[int, int] | None = None) -> int:
        """Label of the segment before position ``index`` in arrival order (0 at the start)."""
        if index == 0:
            return 0
        return (labels or self.labels)[self._order[index - 1]]

    def _nearest_or_new(self, unit: np.ndarray, speech_s: float, index: int, new_voice: bool) -> _Choice:
        """The choice for an embedded segment, a new speaker opened if it is one."""
        choice = self._choose(unit, speech_s, index, new_voice)
        self.last_comparisons = self._speakers
        if choice.new:
            self._new_speaker(unit.size)
        return choice

    def _choose(self, unit: np.ndarray, speech_s: float, index: int, new_voice: bool) -> _Choice:
        """The choice for an embedded segment; changes nothing."""
        if self._sums is None or self._speakers == 0:
            # Short segments before the first embedded one already carry label 0: this speaker is theirs.
            return _Choice(self._speakers, backed=True, new=True)
        active = self._sums[: self._speakers]
        norms = np.linalg.norm(active, axis=1)
        similarities = (active @ unit) / np.maximum(norms, 1e-12)
        best = int(np.argmax(similarities))
        if similarities[best] >= self.config.similarity_threshold or self._speakers >= self.config.max_speakers:
            return _Choice(best, backed=True, new=False)
        if speech_s < (self.config.min_embed_speech_s if new_voice else self.config.min_new_speaker_speech_s):
            return _Choice(self._context_label(index), backed=False, new=False)
        return _Choice(self._speakers, backed=True, new=True)

    def _new_speaker(self, dim: int) -> int:
        if self._sums is None:
            self._sums = np.zeros((self.config.max_speakers, dim), dtype=np.float64)
        label = self._speakers
        self._speakers += 1
        return label

    def _add_to_centroid(self, label: int, unit: np.ndarray, speech_s: float) -> None:
        assert self._sums is not None
        # Longer segments give steadier embeddings: weight by speech time, and keep the total bounded so that
        # new evidence always moves the centroid (exponential forgetting past max_centroid_weight_s).
        total = self._weights[label] + speech_s
        cap = self.config.max_centroid_weight_s
        if total > cap:
            keep = max(cap - speech_s, 0.0) / max(self._weights[label], 1e-12)
            self._sums[label] *= keep
            self._weights[label] *= keep
        self._sums[label] += speech_s * unit
        self._weights[label] += speech_s

    def _rebuild_centroids(self) -> None:
        if self._sums is None:
            return
        self._sums[:] = 0.0
        self._weights[:] = 0.0
        self._speakers = max(self.labels.values(), default=-1) + 1
        for sid in self._order:
            if sid in self._embedded:
                unit, seconds = self._embedded[sid]
                self._add_to_centroid(self.labels[sid], unit, seconds)


def unit_vector(embedding: np.ndarray) -> np.ndarray:
    """``embedding`` L2-normalised as float64; ``ValueError`` for a zero or non-finite vector."""
    vector = np.asarray(embedding, dtype=np.float64).reshape(-1)
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("speaker embedding must be a finite, non-zero vector")
    return vector / norm


def _agglomerate(vectors: np.ndarray, distance: float, max_clusters: int) -> np.ndarray:
    """Average-linkage clusters (0-based ids) of unit vectors, merged up to cosine ``distance``."""
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(vectors, method="average", metric="cosine")
    clusters = fcluster(tree, t=distance, criterion="distance")
    if clusters.max() > max_clusters:
        clusters = fcluster(tree, t=max_clusters, criterion="maxclust")
    return np.asarray(clusters, dtype=np.int64) - 1


def _map_onto(clusters: np.ndarray, streaming: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Rename clusters to the streaming labels they share most speech with (Hungarian).

    Clusters left over get labels above every streaming label, so that they never collide with a streaming
    label that a segment may keep; ``_compact`` renumbers them afterwards.
    """
    from scipy.optimize import linear_sum_assignment

    n_clusters = int(clusters.max()) + 1
    n_labels = int(streaming.max()) + 1
    overlap = np.zeros((n_clusters, n_labels))
    np.add.at(overlap, (clusters, streaming), seconds)
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    rename = {int(r): int(c) for r, c in zip(rows, cols, strict=True) if overlap[r, c] > 0.0}
    fresh = n_labels
    for cluster in range(n_clusters):
        if cluster not in rename:
            rename[cluster] = fresh
            fresh += 1
    return np.array([rename[int(c)] for c in clusters])


def _compact(labels: np.ndarray, first_new: int) -> np.ndarray:
    """Give labels from ``first_new`` on the smallest label numbers no segment uses any more."""
    out = labels.copy()
    used = {int(x) for x in labels if x < first_new}
    free = (label for label in range(first_new + len(labels)) if label not in used)
    for label in sorted({int(x) for x in labels if x >= first_new}):
        out[labels == label] = next(free)
    return out


def _keep_weak_changes(
    vectors: np.ndarray, seconds: np.ndarray, streaming: np.ndarray, proposed: np.ndarray, margin: float
) -> np.ndarray:
    """Undo proposed moves that the embeddings support by less than ``margin`` of cosine.

    A segment moving from streaming label a to label b keeps a unless it is clearly closer to b's centroid
    in the proposal than to a's centroid in the streaming labelling, both without the segment itself.
    """
    final = proposed.copy()
    weighted = vectors * seconds[:, None]
    new_sums = {int(lab): weighted[proposed == lab].sum(axis=0) for lab in np.unique(proposed)}
    old_sums = {int(lab): weighted[streaming == lab].sum(axis=0) for lab in np.unique(streaming)}
    for i in np.flatnonzero(proposed != streaming):
        old, new = int(streaming[i]), int(proposed[i])
        to_new = _cosine(vectors[i], new_sums[new] - weighted[i])
        to_old = _cosine(vectors[i], old_sums[old] - weighted[i])
        if to_new - to_old < margin:
            final[i] = old
    return final


def _cosine(unit: np.ndarray, direction: np.ndarray) -> float:
    norm = float(np.linalg.norm(direction))
    return float(unit @ direction) / norm if norm > 1e-12 else -1.0
