"""DistOpt's machinery, one job per module: the wire formats (wire.py), the fusion of small
gradients into one message (fusion.py), one exchange as two device operations (exchange.py),
and the first step's model check and broadcast (model_sync.py). The package imports none of
them: SINGA's DistOpt (nnmem/dist_opt.py) drives them; the MPI calls are
nnmem/communicator.py's."""
