"""Damage that zipfile reports with errors of its own kind: members marked encrypted (``RuntimeError`` on reading)."""

from __future__ import annotations

HEADERS = ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8))  # local and central headers, and where their flag bits are


def marked_encrypted(raw: bytes) -> bytes:
    """``raw`` (a zip file's bytes) with every member's 'encrypted' flag bit set, in both of its headers."""
    out = bytearray(raw)
    for signature, flags_at in HEADERS:
        at = out.find(signature)
        while at >= 0:
            out[at + flags_at] |= 1
            at = out.find(signature, at + 4)
    return bytes(out)
