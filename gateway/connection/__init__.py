"""One client connection: the core that classifies and enforces every request
(``core``), its two drivers (Trio: ``client``; epoll: ``data_plane`` with its ``lane``s),
the hand-over between them, the upstream side, and the socket helpers they share."""
