#!/bin/bash
# old  mac line
#RSA_DATA_IN=/gpfs/alice/in
