// removed once kernels/ has real sources
