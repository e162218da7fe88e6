"""The embedded semantic model: recall by meaning with no embedding server and no download.

``wordllama`` (PyPI) ships a static embedding model inside its wheel: a 32,000-token vocabulary of 256-dimension
vectors (``weights/l2_supercat_256.safetensors``, 16 MB) and the tokenizer that splits text into those tokens
(``tokenizers/l2_supercat_tokenizer_config.json``). A text's embedding is the mean of its tokens' vectors, the
model's own pooling: about 0.1 ms of CPU per line, no network, no GPU, nothing but numpy and the tokenizer.
Function words are left out first (``content``): in a mean of a dozen tokens, "what did I say about my" outweighs
"job", and a question then lands nearer other questions than the line that answers it. The other words are
weighed by how rare they are among the member's lines (``bot.memory.salience``).

The two files are read from the installed package's folder by path. The package itself is never imported: its
``__init__`` configures the root logger (``logging.basicConfig``), and its ``load()`` (0.4.0) looks for the
tokenizer where the wheel does not put it and then fetches it from Hugging Face. Reading the files directly
needs neither; ``HF_HUB_OFFLINE`` is set as well, so nothing underneath can reach for the hub.

``EmbeddedEmbedder`` answers like the HTTP ``EmbeddingClient`` (``bot.memory.dense.Embedder``): the post-call
queue stores its vectors under ``EMBEDDED_MODEL`` exactly as it stores a server's, and query-aware builds embed the
utterance with it in process. Loading takes a few tenths of a second, done once in a worker thread (at start-up,
``Services.start_background``, or by the first text to embed).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from bot.llm.errors import LLMUnavailable

if TYPE_CHECKING:
    from bot.memory.salience import Salience

PACKAGE = "wordllama"
WEIGHTS = Path("weights") / "l2_supercat_256.safetensors"
TOKENIZER = Path("tokenizers") / "l2_supercat_tokenizer_config.json"
TENSOR = "embedding.weight"
WORD_START = "\u2581"
EMBEDDED_MODEL = "embedded:wordllama/l2_supercat_256/salience"
"""The model id stored with the vectors: switching to or from ``llm.embedding_model`` re-embeds (vectors are kept
per model). ``/salience``: texts are weighed by the member's words (``bot.memory.salience``), so vectors stored
before the weighing are embedded again by the post-call queue's backfill."""
BATCH = 256
"""Texts per batch of the post-call queue's embed step (``MemberEmbedder``) with this model: there is no request
to keep small, and each batch first reads which of the member's lines lack a vector (a read over all of them), so
fewer, larger batches cost less per line (0.41 -> 0.28 ms of CPU per line for a 5,000-line backfill)."""
SLICE = 16
"""Texts embedded between two yields to the event loop (about 1.5 ms): a post-call batch of 64 does not hold up
the utterances of calls in progress."""

Matrix = npt.NDArray[np.float32]
_WORD = re.compile(r"[\w']+")
_FUNCTION_WORDS = """
a about after again all also am an and any are as at be been being but by can could did do does doing done for
from get got had has have he her here him his how i i'd i'll i'm i've if in into is it it's its just me mention
mentioned more most my of on or our out recall remember said say she should so some than that the their them
then there these they this those to told up us very was we were what when where which who why will with would
you your
"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS.split())
"""Words that say how something is asked rather than what about (and the ways of asking a memory: "did I say",
"I told you", "remember")."""


def content(text: str) -> str:
    """``text`` without its function words (the text itself when nothing else is left)."""
    kept = [word for word in _WORD.findall(text) if word.lower() not in FUNCTION_WORDS]
    return " ".join(kept) if kept else text


def package_folder() -> Path | None:
    """Where the installed ``wordllama`` package lies, found without importing it; None when it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def available() -> bool:
    """Whether the model's two files are installed."""
    folder = package_folder()
    return folder is not None and (folder / WEIGHTS).is_file() and (folder / TOKENIZER).is_file()


@dataclass(frozen=True)
class EmbeddedModel:
    """The token vectors and the tokenizer, read from the package's folder."""

    vectors: npt.NDArray[np.float16]
    """One row per token, as shipped (16 MB): gathered rows are averaged in float32."""
    tokenizer: object
    """A ``tokenizers.Tokenizer``."""

    @classmethod
    def load(cls, folder: Path | None = None) -> EmbeddedModel:
        """Read the model from ``folder`` (the installed package's, by default). Blocking: call it in a thread."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = folder or package_folder()
        if folder is None:
            raise FileNotFoundError(f"the {PACKAGE} package is not installed (pip install {PACKAGE})")
        vectors = np.ascontiguousarray(load_file(str(folder / WEIGHTS))[TENSOR], dtype=np.float16)
        return cls(vectors, Tokenizer.from_file(str(folder / TOKENIZER)))

    @property
    def dimensions(self) -> int:
        return int(self.vectors.shape[1])

    def embed_one(self, text: str, salience: Salience | None = None) -> Matrix:
        """The mean of the token vectors of the text's content words (zeros for a text with no token), each token
        weighed by its word's ``salience`` when given."""
        kept = content(text)
        encoding = self.tokenizer.encode(kept, add_special_tokens=False)  # type: ignore[attr-defined]
        ids = encoding.ids
        if not ids:
            return np.zeros(self.dimensions, dtype=np.float32)
        if salience is None:
            mean: Matrix = self.vectors[ids].mean(axis=0, dtype=np.float32)
            return mean
        weights = np.asarray(_token_weights(kept, encoding.tokens, salience), dtype=np.float32)
        weighted: Matrix = weights @ self.vectors[ids].astype(np.float32) / weights.sum()
        return weighted

    def embed(self, texts: Sequence[str], salience: Salience | None = None) -> Matrix:
        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            matrix[row] = self.embed_one(text, salience)
        return matrix


def _token_weights(text: str, tokens: Sequence[str], salience: Salience) -> list[float]:
    """Each token's weight: its word's. The tokenizer marks the first token of each space-separated word with
    ``WORD_START`` (its normalizer turns spaces into it), so the tokens are matched to ``text.split(" ")`` in order."""
    weights = [salience.weight(word) for word in text.split(" ")]
    at = -1
    out = []
    for token in tokens:
        if token.startswith(WORD_START) or at < 0:
            at = min(at + 1, len(weights) - 1)
        out.append(weights[at])
    return out


_loaded: dict[Path | None, EmbeddedModel] = {}
_loading = threading.Lock()


def shared_model(folder: Path | None = None) -> EmbeddedModel:
    """The model of ``folder`` (the package's by default), read once per process: it never changes, and every
    ``EmbeddedEmbedder`` (the query side and the post-call queue's) uses the same one. Blocking."""
    with _loading:
        if folder not in _loaded:
            _loaded[folder] = EmbeddedModel.load(folder)
        return _loaded[folder]


class EmbeddedEmbedder:
    """``bot.memory.dense.Embedder`` with the embedded model, in process."""

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder
        self._model: EmbeddedModel | None = None

    @property
    def model(self) -> str:
        return EMBEDDED_MODEL

    def __repr__(self) -> str:
        return f"EmbeddedEmbedder(model={EMBEDDED_MODEL!r})"

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _load(self) -> EmbeddedModel:
        try:
            self._model = shared_model(self._folder)
        except (OSError, ValueError, ImportError) as exc:
            raise LLMUnavailable(f"the embedded model could not be loaded: {exc}") from exc
        return self._model

    async def load(self) -> EmbeddedModel:
        """The model, read in a worker thread the first time (the event loop goes on meanwhile)."""
        return self._model if self._model is not None else await asyncio.to_thread(self._load)

    @property
    def weighs_words(self) -> bool:
        """Texts are embedded with the member's word weights (``bot.memory.salience``)."""
        return True

    async def embed(
        self, texts: Sequence[str], *, wait_seconds: float | None = None, salience: Salience | None = None
    ) -> Matrix:
        """A (len(texts), 256) float32 matrix. A single text (an utterance) is embedded at once; more (a post-call
        batch) ``SLICE`` at a time, yielding to the event loop between slices. ``wait_seconds`` is for the HTTP
        client's sake: nothing here waits on anything but the first load."""
        model = await self.load()
        if len(texts) <= 1:
            return model.embed(texts, salience)
        parts = []
        for start in range(0, len(texts), SLICE):
            if start:
                await asyncio.sleep(0)
            parts.append(model.embed(texts[start : start + SLICE], salience))
        return np.vstack(parts)

    async def aclose(self) -> None:
        """Nothing to close (the interface's, for the HTTP client's connections)."""
