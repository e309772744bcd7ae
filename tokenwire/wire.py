"""The frame format's details: the codec table, the codec names and a check of one, and the
header that ``tokenwire.frame_info`` returns. docs/wire-format.md is the specification."""

from tokenwire._core import CODEC_TABLE, CODECS, FrameInfo, check_codec

__all__ = ["CODECS", "CODEC_TABLE", "FrameInfo", "check_codec"]
