#!/bin/bash
#RSA_DATAIN=/gpfs/alice/in
#RSA_EARLYSTART=wait
#RSA_STAGEOUT=tar
