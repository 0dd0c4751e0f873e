"""The file extensions zoo reads as videos. A leaf (no numpy, no torch): the command-line parser
uses it to tell a video file from a module name."""

VIDEO_EXTS = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv")
