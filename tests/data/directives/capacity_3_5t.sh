#!/bin/bash
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_CAPACITY=3.5T
