#!/bin/bash
#rsa_data_in=relative/ignored
#Rsa_DATA_IN=x
#RSA_DATA_OUT=/gpfs/alice/out
