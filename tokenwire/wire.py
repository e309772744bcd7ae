"""The frame format's details: the codec names and a check of one, and the header that
``tokenwire.frame_info`` returns. docs/wire-format.md is the specification."""

from tokenwire._core import CODECS, FrameInfo, check_codec

__all__ = ["CODECS", "FrameInfo", "check_codec"]
