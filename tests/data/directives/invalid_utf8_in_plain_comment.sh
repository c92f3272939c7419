#!/bin/bash
# café latin-1 comment
#RSA_DATA_IN=/gpfs/alice/in
