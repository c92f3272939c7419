#!/bin/bash
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_NODES=4
