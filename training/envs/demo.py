"""What a scripted demonstrator says, and whether SFT learns it.

A demonstrator that errs on purpose (so that its episodes reach the states errors
lead to) can return :class:`DemoReply` with ``imitate=False`` for an injected error:
the reply is executed, and SFT's loss skips its tokens (clean labels on noisy
states). A bare reply is learned. Torch-free: environments and their oracles import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DemoReply"]


@dataclass(frozen=True, slots=True)
class DemoReply:
    """A scripted reply (the action text, or an assistant message) with whether SFT learns it."""

    reply: str | Mapping[str, Any]
    imitate: bool = True
